//! One [`Gpu`] per CUDA device: the shared primary context, a pool of streams, the caching
//! device-memory pool, the pinned staging buffers and the program cache.
//!
//! # Completion contract
//! - Every *blocking* call here (uploads, downloads, copies, [`Gpu::launch`] without a stream,
//!   and every converter) returns only when its results are complete: the data may be read by
//!   the host or by any stream of any device without further synchronisation.
//! - The *non-blocking* calls ([`Gpu::upload_async`], [`Gpu::launch`] with a stream) return a
//!   [`Ready`] event recorded on the producing stream. The consumer either makes its stream wait
//!   on it ([`Ready::wait_on`], no host blocking) or blocks with [`Ready::synchronize`].
//! - A device buffer remembers its last pending use; dropping it waits for that work before the
//!   memory returns to the pool, so the pool never hands out memory still being written.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bridge_core::backend::{Capabilities, DeviceInfo};
use bridge_core::kernel::{KernelSource, source_hash};
use bridge_core::memory::{CachingPool, MemoryLimit, MemoryStats, PoolBlock, RawAllocator};
use bridge_core::{BridgeError, Device, Result};
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream};

use crate::error::{self, BACKEND};
use crate::ffi::{self, DeviceMem, PinnedMem};
use crate::nvrtc::{self, Target};
use crate::probe;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The [`RawAllocator`] behind each device's [`CachingPool`]: `cuMemAlloc`/`cuMemFree`.
/// `CUDA_ERROR_OUT_OF_MEMORY` (only) becomes [`BridgeError::OutOfMemory`].
#[derive(Debug)]
pub struct CudaAllocator {
    ctx: Arc<CudaContext>,
    device: Device,
    total: u64,
}

impl RawAllocator for CudaAllocator {
    type Block = DeviceMem;
    fn device(&self) -> Device {
        self.device
    }
    fn total_memory(&self) -> u64 {
        self.total
    }
    fn allocate(&self, bytes: usize) -> Result<DeviceMem> {
        DeviceMem::alloc(&self.ctx, self.device, bytes)
    }
    fn free(&self, block: DeviceMem) {
        drop(block);
    }
}

/// Format a CUDA device UUID as `nvidia-smi` does: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
/// Other backends (Torch) must use the same format so the planner can match devices.
pub fn format_uuid(bytes: [u8; 16]) -> String {
    let h: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// An event marking the completion of non-blocking work (see the module's completion contract).
#[derive(Debug)]
pub struct Ready {
    event: CudaEvent,
    device: Device,
    /// The raw handle of the stream it was recorded on (work on one stream is ordered).
    stream: usize,
}

impl crate::pending::Completion for Ready {
    fn stream_key(&self) -> usize {
        self.stream
    }
    fn is_complete(&self) -> bool {
        self.event.is_complete()
    }
    fn synchronize(&self) -> Result<()> {
        Ready::synchronize(self)
    }
}

/// The key [`Ready`] events use for `stream`.
pub(crate) fn stream_key(stream: &CudaStream) -> usize {
    stream.cu_stream() as usize
}

impl Ready {
    /// Make `stream` wait (on the device, without blocking the host) until the work is done.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        stream
            .wait(&self.event)
            .map_err(error::op(self.device, "cuStreamWaitEvent"))
    }
    /// Block the host until the work is done.
    pub fn synchronize(&self) -> Result<()> {
        self.event
            .synchronize()
            .map_err(error::op(self.device, "cuEventSynchronize"))
    }
    /// Whether the work is done.
    pub fn is_complete(&self) -> bool {
        self.event.is_complete()
    }
    /// The raw event.
    pub fn event(&self) -> &CudaEvent {
        &self.event
    }
}

/// A stream borrowed from a device's stream pool; goes back to the pool when dropped.
pub struct StreamLease {
    stream: Option<Arc<CudaStream>>,
    gpu: Arc<Gpu>,
}

impl std::ops::Deref for StreamLease {
    type Target = CudaStream;
    fn deref(&self) -> &CudaStream {
        match &self.stream {
            Some(s) => s,
            None => unreachable!("StreamLease used after drop"),
        }
    }
}

impl StreamLease {
    /// The stream as a shareable handle.
    pub fn arc(&self) -> Option<&Arc<CudaStream>> {
        self.stream.as_ref()
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            // Only clean streams go back: a failed sync means the stream is in an error state.
            if s.synchronize().is_ok() {
                lock(&self.gpu.streams).push(s);
            }
        }
    }
}

/// A compiled program (module) on one device.
#[derive(Debug)]
pub struct Program {
    module: Arc<CudaModule>,
    ctx: Arc<CudaContext>,
    name: String,
    device: Device,
    functions: Mutex<HashMap<String, CachedFunction>>,
}

/// A kernel handle with its parameter sizes (asked of the driver once).
#[derive(Debug, Clone)]
pub(crate) struct CachedFunction {
    pub(crate) func: CudaFunction,
    pub(crate) param_sizes: Option<Arc<[usize]>>,
}

impl Program {
    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// A kernel entry point.
    pub fn function(&self, entry: &str) -> Result<CudaFunction> {
        Ok(self.cached_function(entry)?.func)
    }

    /// A kernel entry point and its parameter sizes, looked up once per program.
    pub(crate) fn cached_function(&self, entry: &str) -> Result<CachedFunction> {
        let mut f = lock(&self.functions);
        if let Some(func) = f.get(entry) {
            return Ok(func.clone());
        }
        // cuModuleGetFunction needs the module's context current on this thread
        self.ctx
            .bind_to_thread()
            .map_err(error::op(self.device, "cuCtxSetCurrent"))?;
        let func = self.module.load_function(entry).map_err(|e| {
            BridgeError::backend(
                BACKEND,
                Some(e.0 as i64),
                format!(
                    "kernel {entry:?} not found in program {} on {}: {:?}",
                    self.name, self.device, e.0
                ),
            )
        })?;
        let cached = CachedFunction {
            param_sizes: ffi::param_sizes(&func).map(Arc::from),
            func,
        };
        f.insert(entry.to_owned(), cached.clone());
        Ok(cached)
    }
}

/// Program-cache key within a device: (source hash including options, options).
type ProgramKey = (u64, Vec<String>);

/// Default size of one pinned staging chunk ([`Staging::chunk`]). 64 MiB × 4 buffers won on an
/// H100 (2026-11-23): pinned-staged host→device 1 GiB at 81 % of a plain pinned `cuMemcpy`,
/// against 44 % with 16 MiB × 2 (docs/perf.md).
pub const STAGING_CHUNK: usize = 64 << 20;
/// Default number of staging buffers in flight ([`Staging::buffers`]).
pub const STAGING_BUFFERS: usize = 4;
/// Staging buffers kept per device for reuse.
const STAGING_KEEP: usize = 8;

/// Smallest chunk of a staged copy cut to its size ([`Staging::plan`]).
pub const STAGING_MIN_CHUNK: usize = 1 << 20;

/// How staged host↔device copies are cut: chunks of at most `chunk` bytes through `buffers`
/// pinned buffers in flight ([`Staging::plan`]). Read once per process from
/// `ARRAYBRIDGE_STAGING_CHUNK_MB` (1–1024, default 64), `ARRAYBRIDGE_STAGING_BUFFERS` (2–8,
/// default 4), `ARRAYBRIDGE_STAGING_ADAPT` (0/1, default 1) and
/// `ARRAYBRIDGE_HOST_REGISTER_MB` (default 0); values out of range fall back to the defaults
/// with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staging {
    /// Bytes per chunk (the size of each pinned staging buffer).
    pub chunk: usize,
    /// Buffers in flight.
    pub buffers: usize,
    /// Cut a copy into chunks of about an eighth of its size (at least
    /// [`STAGING_MIN_CHUNK`], at most `chunk`), so that copies under 8 chunks still overlap the
    /// host's part with the DMA engine's.
    pub adapt: bool,
    /// Host ranges of at least this many bytes are page-locked in place
    /// (`cuMemHostRegister`) and copied with no staging; 0: never.
    pub register_min: usize,
}

impl Staging {
    /// The defaults: [`STAGING_CHUNK`] bytes, [`STAGING_BUFFERS`] buffers, adapted chunks, no
    /// registration.
    pub const DEFAULT: Staging = Staging {
        chunk: STAGING_CHUNK,
        buffers: STAGING_BUFFERS,
        adapt: true,
        register_min: 0,
    };

    /// The process's setting (environment, read once).
    pub fn get() -> Staging {
        static S: OnceLock<Staging> = OnceLock::new();
        *S.get_or_init(|| {
            // read through the tuning knobs (one reading of the environment per process)
            let mut s = Staging::parse(
                bridge_core::tuning::raw("ARRAYBRIDGE_STAGING_CHUNK_MB").as_deref(),
                bridge_core::tuning::raw("ARRAYBRIDGE_STAGING_BUFFERS").as_deref(),
            );
            s.adapt = bridge_core::tuning::usize_or("ARRAYBRIDGE_STAGING_ADAPT", 1) != 0;
            s.register_min = bridge_core::tuning::usize_or("ARRAYBRIDGE_HOST_REGISTER_MB", 0) << 20;
            s
        })
    }

    /// How a staged copy of `len` bytes is cut: the chunk size and the buffers in flight. With
    /// [`Staging::adapt`], chunks of `len / 8` rounded up to 64 KiB, within
    /// [`STAGING_MIN_CHUNK`]..=`chunk` (a 64 MiB copy goes in 8 chunks of 8 MiB, not one of
    /// 64 MiB that the host fills before the DMA engine starts); otherwise `chunk`. A copy of
    /// at most `chunk` bytes takes at most two buffers (double-buffered), a larger one up to
    /// `buffers`.
    pub fn plan(&self, len: usize) -> (usize, usize) {
        let chunk = if self.adapt {
            len.div_ceil(8)
                .next_multiple_of(64 << 10)
                .max(STAGING_MIN_CHUNK)
                .min(self.chunk)
        } else {
            self.chunk
        }
        .max(1);
        let n = len.div_ceil(chunk).max(1);
        // a copy of at most one whole chunk is double-buffered (two pinned buffers, each of
        // `chunk` bytes); a larger one takes every buffer in flight
        let buffers = if len <= self.chunk {
            self.buffers.min(2)
        } else {
            self.buffers
        };
        (chunk, buffers.min(n).max(1))
    }

    /// The setting for the two variables' values (`None`: unset).
    pub fn parse(chunk_mb: Option<&str>, buffers: Option<&str>) -> Staging {
        let mut s = Staging::DEFAULT;
        if let Some(v) = chunk_mb {
            match v.trim().parse::<usize>() {
                Ok(mb) if (1..=1024).contains(&mb) => s.chunk = mb << 20,
                _ => log::warn!(
                    "ARRAYBRIDGE_STAGING_CHUNK_MB={v:?} is not in 1..=1024; using {}",
                    STAGING_CHUNK >> 20
                ),
            }
        }
        if let Some(v) = buffers {
            match v.trim().parse::<usize>() {
                Ok(n) if (2..=8).contains(&n) => s.buffers = n,
                _ => log::warn!(
                    "ARRAYBRIDGE_STAGING_BUFFERS={v:?} is not in 2..=8; using {STAGING_BUFFERS}"
                ),
            }
        }
        s
    }
}

/// One CUDA device: shared primary context, stream pool, caching pool, staging buffers and
/// program cache. Get it with [`gpu`]; cheap to share (`Arc`).
pub struct Gpu {
    pub(crate) ordinal: usize,
    pub(crate) device: Device,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) info: DeviceInfo,
    pub(crate) pool: CachingPool<CudaAllocator>,
    pub(crate) streams: Mutex<Vec<Arc<CudaStream>>>,
    pub(crate) staging: Mutex<Vec<PinnedMem>>,
    programs: Mutex<HashMap<ProgramKey, Arc<Program>>>,
    pub(crate) peers_enabled: Mutex<HashSet<usize>>,
    cc: (u32, u32),
    /// The device's one executor state ([`crate::CudaExecutor::from_gpu`]), made on first use;
    /// held as `Any` so that this bottom module does not import the executor's.
    pub(crate) executor: Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>,
    /// Executors ever created on this device (see [`Gpu::executors_created`]).
    pub(crate) executors_created: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for Gpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpu")
            .field("device", &self.device)
            .field("name", &self.info.name)
            .field("pool", &self.pool.stats())
            .finish()
    }
}

/// The shared [`Gpu`] for CUDA ordinal `ordinal` (created on first use: primary context, pools).
///
/// One per process on purpose (unlike an OpenCL backend instance, which its registry owns): the
/// driver keeps one primary context per device and process, and this mirrors it, so that a
/// device has one pool, one memory limit and one OOM release whichever registry asks.
/// Returns [`BridgeError::BackendUnavailable`] without a driver and
/// [`BridgeError::UnknownDevice`] for an ordinal out of range. Never panics.
pub fn gpu(ordinal: usize) -> Result<Arc<Gpu>> {
    static GPUS: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
    let n = probe::device_count()?;
    if ordinal >= n {
        return Err(BridgeError::UnknownDevice {
            device: Device::Cuda(ordinal),
            available: format!("{n} CUDA device(s)"),
        });
    }
    let mut map = lock(GPUS.get_or_init(|| Mutex::new(HashMap::new())));
    if let Some(g) = map.get(&ordinal) {
        return Ok(Arc::clone(g));
    }
    let g = Arc::new(ffi::guarded("opening the CUDA device", || {
        Gpu::open(ordinal)
    })?);
    map.insert(ordinal, Arc::clone(&g));
    Ok(g)
}

/// [`gpu`] for a [`Device`]: `cuda:N` only; other devices are
/// [`BridgeError::InvalidPlacement`].
pub fn gpu_for(device: Device) -> Result<Arc<Gpu>> {
    match device {
        Device::Cuda(n) => gpu(n),
        other => Err(BridgeError::InvalidPlacement {
            memory_type: bridge_core::MemoryType::Cuda,
            device: other,
        }),
    }
}

impl Gpu {
    fn open(ordinal: usize) -> Result<Gpu> {
        let device = Device::Cuda(ordinal);
        let ctx =
            CudaContext::new(ordinal).map_err(error::op(device, "cuDevicePrimaryCtxRetain"))?;
        let attr = |a: Attr| {
            ctx.attribute(a)
                .map_err(error::op(device, "cuDeviceGetAttribute"))
        };
        let cc = (
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?.max(0) as u32,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?.max(0) as u32,
        );
        let sms = attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(0) as u32;
        let name = ctx.name().map_err(error::op(device, "cuDeviceGetName"))?;
        let uuid = ctx.uuid().map_err(error::op(device, "cuDeviceGetUuid"))?;
        let uuid = format_uuid(uuid.bytes.map(|b| b as u8));
        let total = ctx
            .total_mem()
            .map_err(error::op(device, "cuDeviceTotalMem"))? as u64;
        let free = ctx.mem_get_info().ok().map(|(f, _)| f as u64);
        let mut details = vec![("pci".to_owned(), pci_id(&ctx))];
        if let Some(v) = ffi::driver_version() {
            details.push((
                "driver".to_owned(),
                format!("{}.{}", v / 1000, (v % 1000) / 10),
            ));
        }
        let info = DeviceInfo {
            device,
            name,
            uuid: Some(uuid),
            total_memory: Some(total),
            free_memory: free,
            capabilities: Capabilities {
                fp16: cc >= (5, 3),
                bf16: cc >= (8, 0),
                fp64: true,
                compute_units: Some(sms),
                max_alloc: Some(total),
                compute_capability: Some(cc),
            },
            details,
        };
        let pool = CachingPool::new(CudaAllocator {
            ctx: Arc::clone(&ctx),
            device,
            total,
        });
        Ok(Gpu {
            ordinal,
            device,
            ctx,
            info,
            pool,
            streams: Mutex::new(Vec::new()),
            staging: Mutex::new(Vec::new()),
            programs: Mutex::new(HashMap::new()),
            peers_enabled: Mutex::new(HashSet::new()),
            cc,
            executor: Mutex::new(None),
            executors_created: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The device id (`cuda:N`).
    pub fn device(&self) -> Device {
        self.device
    }
    /// The CUDA ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    /// The shared primary context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// What the device is (name, UUID, memory at open time, capabilities).
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (u32, u32) {
        self.cc
    }
    /// How many executors (stream, program lookup, upload ring) were created on this device in
    /// this process: 1 once anything ran on it, however many back ends, chunks and calls used
    /// it (each [`crate::CudaExecutor::with_mode`] adds one).
    pub fn executors_created(&self) -> usize {
        self.executors_created
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The caching memory pool.
    pub fn pool(&self) -> &CachingPool<CudaAllocator> {
        &self.pool
    }

    /// Borrow a stream from the device's pool (created on demand, returned on drop).
    pub fn stream(self: &Arc<Self>) -> Result<StreamLease> {
        let s = lock(&self.streams).pop();
        let s = match s {
            Some(s) => s,
            None => self.new_stream()?,
        };
        Ok(StreamLease {
            stream: Some(s),
            gpu: Arc::clone(self),
        })
    }

    /// A new non-blocking stream owned by the caller.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.ctx
            .new_stream()
            .map_err(error::op(self.device, "cuStreamCreate"))
    }

    /// Record an event on `stream` (a [`Ready`] token for the work enqueued so far).
    pub fn record(&self, stream: &CudaStream) -> Result<Ready> {
        let event = stream
            .record_event(None)
            .map_err(error::op(self.device, "cuEventRecord"))?;
        Ok(Ready {
            event,
            device: self.device,
            stream: stream_key(stream),
        })
    }

    /// Allocate `bytes` from the caching pool.
    pub fn alloc_bytes(&self, bytes: usize) -> Result<PoolBlock<CudaAllocator>> {
        self.pool.allocate(bytes)
    }

    /// Driver figures (`cuMemGetInfo`) plus the pool's.
    pub fn memory_stats(&self) -> Result<MemoryStats> {
        self.ctx
            .bind_to_thread()
            .map_err(error::op(self.device, "cuCtxSetCurrent"))?;
        let (free, total) = self
            .ctx
            .mem_get_info()
            .map_err(error::op(self.device, "cuMemGetInfo"))?;
        let p = self.pool.stats();
        Ok(MemoryStats::from_pool(total as u64, Some(free as u64), &p))
    }

    /// Limit the pool to `fraction` of total memory (e.g. `0.8`); allocations beyond it fail
    /// with [`BridgeError::OutOfMemory`].
    pub fn set_memory_limit(&self, fraction: f64) -> Result<()> {
        self.pool.set_limit(Some(MemoryLimit::fraction(fraction)?));
        Ok(())
    }

    /// Remove the pool's limit.
    pub fn clear_memory_limit(&self) {
        self.pool.set_limit(None);
    }

    /// Free cached device memory and staging buffers; returns the device bytes released.
    pub fn release(&self) -> u64 {
        lock(&self.staging).clear();
        self.pool.release()
    }

    /// Take `n` pinned staging buffers of [`Staging::get`]`().chunk` bytes (reused or new).
    pub(crate) fn take_staging(&self, n: usize) -> Result<Vec<PinnedMem>> {
        let mut out = Vec::with_capacity(n);
        {
            let mut pool = lock(&self.staging);
            while out.len() < n {
                match pool.pop() {
                    Some(b) => out.push(b),
                    None => break,
                }
            }
        }
        while out.len() < n {
            out.push(PinnedMem::alloc(
                &self.ctx,
                self.device,
                Staging::get().chunk,
            )?);
        }
        Ok(out)
    }

    /// Return staging buffers (their copies must be complete).
    pub(crate) fn give_staging(&self, bufs: Vec<PinnedMem>) {
        let mut pool = lock(&self.staging);
        for b in bufs {
            if pool.len() < STAGING_KEEP {
                pool.push(b);
            }
        }
    }

    /// Compile (or fetch from the cache) `src` with build `options` (`-D...`) for this device,
    /// after the process-wide [`nvrtc::device_options`] (`ARRAYBRIDGE_NVRTC_OPTIONS`, default
    /// `--fmad=false`). The cache key is (device, source hash, options). Compile errors are
    /// [`BridgeError::KernelCompile`] with NVRTC's log.
    pub fn program(&self, src: &KernelSource, options: &[&str]) -> Result<Arc<Program>> {
        let mut all: Vec<&str> = nvrtc::device_options().iter().map(String::as_str).collect();
        all.extend_from_slice(options);
        let key = (
            source_hash(src.source, &all),
            all.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
        );
        if let Some(p) = lock(&self.programs).get(&key) {
            return Ok(Arc::clone(p));
        }
        let code = crate::kernel::full_source(src);
        let image = nvrtc::compile(
            src.name,
            &code,
            &key.1,
            Target::Cubin(self.cc.0, self.cc.1),
            self.device,
        )?;
        if !image.log.is_empty() {
            log::debug!(
                "NVRTC log for {} on {}: {}",
                src.name,
                self.device,
                image.log
            );
        }
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(image.bytes))
            .map_err(error::op(self.device, "cuModuleLoadData"))?;
        let program = Arc::new(Program {
            module,
            ctx: Arc::clone(&self.ctx),
            name: src.name.to_owned(),
            device: self.device,
            functions: Mutex::new(HashMap::new()),
        });
        lock(&self.programs).insert(key, Arc::clone(&program));
        Ok(program)
    }
}

fn pci_id(ctx: &CudaContext) -> String {
    let a = |x: Attr| ctx.attribute(x).unwrap_or(-1);
    format!(
        "{:04x}:{:02x}:{:02x}",
        a(Attr::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        a(Attr::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        a(Attr::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)
    )
}

#[cfg(test)]
mod tests {
    use super::{STAGING_BUFFERS, STAGING_CHUNK, Staging};

    #[test]
    fn staging_knobs_parse_and_fall_back() {
        assert_eq!(Staging::parse(None, None), Staging::DEFAULT);
        assert_eq!(
            Staging::parse(Some("16"), Some("2")),
            Staging {
                chunk: 16 << 20,
                buffers: 2,
                ..Staging::DEFAULT
            }
        );
        assert_eq!(Staging::parse(Some(" 1024 "), None).chunk, 1024 << 20);
        for bad in ["0", "1025", "-3", "lots", ""] {
            assert_eq!(
                Staging::parse(Some(bad), None).chunk,
                STAGING_CHUNK,
                "{bad}"
            );
        }
        for bad in ["0", "1", "9", "two"] {
            assert_eq!(
                Staging::parse(None, Some(bad)).buffers,
                STAGING_BUFFERS,
                "{bad}"
            );
        }
    }

    /// Adapted chunks: about an eighth of the copy, whole 64 KiB, at least 1 MiB, at most the
    /// configured chunk; every byte covered; never more buffers than chunks.
    #[test]
    fn staged_copies_are_cut_to_their_size() {
        let s = Staging::DEFAULT;
        const MB: usize = 1 << 20;
        assert_eq!(s.plan(64 * MB), (8 * MB, 2));
        assert_eq!(s.plan(65 * MB), (65 * MB / 8, 4));
        assert_eq!(s.plan(1024 * MB), (64 * MB, 4));
        assert_eq!(s.plan(2 * MB), (MB, 2));
        assert_eq!(s.plan(MB + 1), (MB, 2));
        assert_eq!(s.plan(1), (MB, 1));
        assert_eq!(s.plan(0), (MB, 1));
        let fixed = Staging {
            adapt: false,
            ..Staging::DEFAULT
        };
        assert_eq!(fixed.plan(64 * MB), (64 * MB, 1));
        let small = Staging {
            chunk: MB / 2,
            ..Staging::DEFAULT
        };
        assert_eq!(small.plan(64 * MB), (MB / 2, 4));
        for len in [1usize, 4095, 3 * MB + 17, 100 * MB - 3, 513 * MB] {
            let (chunk, nbuf) = s.plan(len);
            assert!(chunk <= s.chunk && chunk % (64 << 10) == 0, "{len}");
            assert!(len.div_ceil(chunk) <= 8 || chunk == s.chunk, "{len}");
            assert!(nbuf >= 1 && nbuf <= s.buffers && nbuf <= len.div_ceil(chunk).max(1));
            assert!(len > s.chunk || nbuf <= 2, "{len}");
        }
    }
}
