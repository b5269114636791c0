//! [`OpenClBackend`]: discovery, per-device state (context, queue, pool) and program caches,
//! the [`MemoryInfo`] implementation, and the array-level API. The
//! [`Backend`](bridge_core::backend::Backend) implementation, which hands the registry this
//! backend's converters, is in `registration.rs`.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use bridge_core::array::HostData;
use bridge_core::backend::DeviceInfo;
use bridge_core::kernel::KernelSource;
use bridge_core::memory::{CachingPool, MemoryInfo, MemoryLimit, MemoryStats, PoolStats};
use bridge_core::{
    Array, BridgeError, DType, Device, Element, HostElement, MemoryType, Result, dispatch_dtype,
};
use ndarray::{ArrayD, IxDyn};
use opencl3::context::Context;

use crate::buffer::{ClBuffer, ClStorage, Pending};
use crate::discovery::{self, DeviceEntry, Discovery};
use crate::error::cl_error;
use crate::kernel::{ClProgram, ProgramCache};
use crate::launches::Launches;
use crate::raw;
use crate::state::{ClAllocator, DeviceState};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Inner {
    /// This instance, for the device states it opens ([`DeviceState::backend`]).
    me: std::sync::Weak<Inner>,
    contexts: Mutex<HashMap<usize, Arc<Context>>>,
    states: Mutex<HashMap<usize, Arc<DeviceState>>>,
    /// Built programs, one cache per device ordinal.
    programs: Mutex<HashMap<usize, Arc<ProgramCache>>>,
    /// What an executor needs to know of each device (doubles, CPU or not), asked once per
    /// device: the device's one executor state ([`crate::OpenClExecutor::new`]).
    executors: Mutex<HashMap<usize, ExecutorInfo>>,
    /// Kernels of the executor's launches, built once: (device ordinal, source text address and
    /// length, options hash) to the program's kernels by entry point.
    kernels: Mutex<HashMap<KernelKey, Vec<KernelSlot>>>,
    /// Host-to-device copies made through the executor, per device ordinal: (calls, bytes,
    /// calls of at least [`BULK_UPLOAD`] bytes).
    uploads: Mutex<HashMap<usize, (u64, u64, u64)>>,
    /// The executor's launches in flight, per device ordinal (shared by the device's
    /// executors). Dropped with the instance: each waits for its kernel first.
    launches: Mutex<HashMap<usize, Arc<Launches>>>,
}

/// The size from which [`OpenClBackend::executor_bulk_uploads`] counts an upload (64 KiB).
pub const BULK_UPLOAD: usize = 64 << 10;

/// (device ordinal, source address, source length, options hash).
type KernelKey = (usize, usize, usize, u64);

/// One cached kernel: its entry point and the options it was built with (compared on every
/// hit), and the kernel (one launch at a time sets its arguments and enqueues it).
struct KernelSlot {
    entry: String,
    options: Vec<String>,
    kernel: Arc<Mutex<crate::kernel::ClKernel>>,
}

/// What an [`crate::OpenClExecutor`] knows of its device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExecutorInfo {
    pub(crate) fp64: bool,
    pub(crate) cpu: bool,
}

impl Inner {
    pub(crate) fn discovery(&self) -> Result<&Discovery> {
        discovery::discovery()
            .as_ref()
            .map_err(|r| discovery::unavailable(r))
    }

    pub(crate) fn entry(&self, device: Device) -> Result<&DeviceEntry> {
        let Device::OpenCl(n) = device else {
            return Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::OpenCl,
                device,
            });
        };
        let d = self.discovery()?;
        d.devices.get(n).ok_or_else(|| BridgeError::UnknownDevice {
            device,
            available: format!(
                "opencl devices available: {}",
                d.devices
                    .iter()
                    .map(|e| format!("{} ({})", e.device, e.info.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    /// The state of `device` if it has been used already (no side effect).
    pub(crate) fn existing_state(&self, device: Device) -> Option<Arc<DeviceState>> {
        let n = device.ordinal()?;
        lock(&self.states).get(&n).cloned()
    }

    /// The state of `device`, creating its context (shared by its platform), queue and pool on
    /// first use.
    pub(crate) fn state(&self, device: Device) -> Result<Arc<DeviceState>> {
        let entry = self.entry(device)?.clone();
        let n = entry.device.ordinal().unwrap_or_default();
        let mut states = lock(&self.states);
        if let Some(s) = states.get(&n) {
            return Ok(Arc::clone(s));
        }
        let context = {
            let mut contexts = lock(&self.contexts);
            match contexts.get(&entry.platform) {
                Some(c) => Arc::clone(c),
                None => {
                    let disc = self.discovery()?;
                    let ids: Vec<_> = disc
                        .platforms
                        .get(entry.platform)
                        .map(|v| {
                            v.iter()
                                .filter_map(|&o| disc.devices.get(o))
                                .map(|e| e.id.id())
                                .collect()
                        })
                        .unwrap_or_default();
                    let ctx = Context::from_devices(&ids, &[], None, std::ptr::null_mut())
                        .map_err(|e| cl_error(device, "clCreateContext", e.0, 0))?;
                    let ctx = Arc::new(ctx);
                    contexts.insert(entry.platform, Arc::clone(&ctx));
                    ctx
                }
            }
        };
        log::debug!("opencl: opened {device} ({})", entry.info.name);
        let queue = raw::create_queue(&context, entry.id.id())
            .map_err(|c| cl_error(device, "clCreateCommandQueue", c, 0))?;
        let transfer = raw::create_queue(&context, entry.id.id())
            .map_err(|c| cl_error(device, "clCreateCommandQueue", c, 0))?;
        let pool = CachingPool::new(ClAllocator::new(
            device,
            Arc::clone(&context),
            entry.global_mem,
            entry.max_alloc,
        ));
        let state = Arc::new(DeviceState {
            entry,
            context,
            queue,
            transfer,
            pool,
            backend: self.me.clone() as std::sync::Weak<dyn std::any::Any + Send + Sync>,
        });
        states.insert(n, Arc::clone(&state));
        Ok(state)
    }

    /// The program cache of `state`'s device (created empty on first use).
    pub(crate) fn programs(&self, state: &DeviceState) -> Arc<ProgramCache> {
        let n = state.device().ordinal().unwrap_or_default();
        Arc::clone(lock(&self.programs).entry(n).or_default())
    }

    pub(crate) fn alloc(&self, device: Device, bytes: usize) -> Result<ClBuffer> {
        let state = self.state(device)?;
        let block = state.pool.allocate(bytes)?;
        Ok(ClBuffer::from_block(block, bytes, state))
    }
}

/// The OpenCL backend. Construction does nothing; platforms and devices are enumerated on the
/// first call that needs them, and a device's context, queue and pool are created on its first
/// use. Each instance has its own pools and program caches; register one instance with the
/// registry and use that instance.
///
/// Devices of one platform share one OpenCL context, so copies between them are device-side
/// ([`TransferKind::PeerCopy`](bridge_core::convert::TransferKind)); copies between platforms
/// are staged through host memory.
#[derive(Clone)]
pub struct OpenClBackend {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for OpenClBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let states = lock(&self.inner.states).len();
        f.debug_struct("OpenClBackend")
            .field("devices_in_use", &states)
            .finish()
    }
}

impl Default for OpenClBackend {
    fn default() -> Self {
        OpenClBackend::new()
    }
}

impl OpenClBackend {
    /// A backend that has not touched the driver yet.
    pub fn new() -> Self {
        OpenClBackend {
            inner: Arc::new_cyclic(|me| Inner {
                me: me.clone(),
                contexts: Mutex::new(HashMap::new()),
                states: Mutex::new(HashMap::new()),
                programs: Mutex::new(HashMap::new()),
                executors: Mutex::new(HashMap::new()),
                kernels: Mutex::new(HashMap::new()),
                uploads: Mutex::new(HashMap::new()),
                launches: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The kernel `entry` of `src` built with `options` on `device`, built once and kept (the
    /// executor's launches; no source hashing or kernel creation per launch).
    pub(crate) fn cached_kernel(
        &self,
        device: Device,
        src: &'static KernelSource,
        options: &[&str],
        entry: &str,
    ) -> Result<Arc<Mutex<crate::kernel::ClKernel>>> {
        let (at, len, options_hash) = bridge_core::kernel::launch_key(src, options);
        let key: KernelKey = (device.ordinal().unwrap_or_default(), at, len, options_hash);
        let same = |k: &KernelSlot| {
            k.entry == entry && bridge_core::kernel::same_options(&k.options, options)
        };
        if let Some(k) = lock(&self.inner.kernels)
            .get(&key)
            .and_then(|v| v.iter().find(|k| same(k)))
        {
            return Ok(Arc::clone(&k.kernel));
        }
        let kernel = Arc::new(Mutex::new(
            self.program_from(device, src, options)?.kernel(entry)?,
        ));
        lock(&self.inner.kernels)
            .entry(key)
            .or_default()
            .push(KernelSlot {
                entry: entry.to_owned(),
                options: options.iter().map(|o| (*o).to_owned()).collect(),
                kernel: Arc::clone(&kernel),
            });
        Ok(kernel)
    }

    /// The executor state of `device`, asked of the driver on first use and kept.
    pub(crate) fn executor_info(&self, device: Device) -> Result<ExecutorInfo> {
        let entry = self.inner.entry(device)?;
        let n = device.ordinal().unwrap_or_default();
        let mut map = lock(&self.inner.executors);
        if let Some(i) = map.get(&n) {
            return Ok(*i);
        }
        let info = ExecutorInfo {
            fp64: entry.check_dtype(DType::F64).is_ok(),
            cpu: entry.info.is_cpu_device(),
        };
        map.insert(n, info);
        Ok(info)
    }

    /// How many executor states this backend instance has made for `device`: 1 once
    /// anything ran on it, however many back ends, chunks and calls used it (0 before).
    pub fn executors_created(&self, device: Device) -> usize {
        let n = device.ordinal().unwrap_or_default();
        usize::from(
            device.memory_type() == MemoryType::OpenCl
                && lock(&self.inner.executors).contains_key(&n),
        )
    }

    /// Host-to-device copies the executor of `device` made on this backend instance so far:
    /// (uploads, bytes). What a pipeline moved, for tests and reports (a movie whose pixels
    /// cross once shows its size here, plus the parameters' few bytes).
    pub fn executor_uploads(&self, device: Device) -> (u64, u64) {
        let n = device.ordinal().unwrap_or_default();
        lock(&self.inner.uploads)
            .get(&n)
            .map_or((0, 0), |&(calls, bytes, _)| (calls, bytes))
    }

    /// Host-to-device copies of at least [`BULK_UPLOAD`] bytes the executor of `device` made on
    /// this backend instance so far: the pixels of a chunk of frames, say, apart from the
    /// small parameter uploads around them (a test counts one per chunk).
    pub fn executor_bulk_uploads(&self, device: Device) -> u64 {
        let n = device.ordinal().unwrap_or_default();
        lock(&self.inner.uploads).get(&n).map_or(0, |u| u.2)
    }

    /// The list of launches in flight of `device`'s executors (created empty on first use).
    pub(crate) fn launches(&self, device: Device) -> Arc<Launches> {
        let n = device.ordinal().unwrap_or_default();
        Arc::clone(lock(&self.inner.launches).entry(n).or_default())
    }

    pub(crate) fn count_upload(&self, device: Device, bytes: usize) {
        let n = device.ordinal().unwrap_or_default();
        let mut u = lock(&self.inner.uploads);
        let e = u.entry(n).or_default();
        e.0 += 1;
        e.1 += bytes as u64;
        e.2 += u64::from(bytes >= BULK_UPLOAD);
    }

    /// Number of devices (0 when OpenCL is unavailable).
    pub fn device_count(&self) -> usize {
        self.inner.discovery().map(|d| d.devices.len()).unwrap_or(0)
    }

    /// The description of one device.
    pub fn device_info(&self, device: Device) -> Result<DeviceInfo> {
        Ok(self.inner.entry(device)?.info.clone())
    }

    /// Whether `dtype` can live on `device`: `Ok` or [`BridgeError::UnsupportedDType`]
    /// (f16 needs `cl_khr_fp16`, f64 needs `cl_khr_fp64`; bf16 is stored as plain 16-bit words
    /// and is accepted everywhere).
    pub fn check_dtype(&self, device: Device, dtype: DType) -> Result<()> {
        self.inner.entry(device)?.check_dtype(dtype)
    }

    /// Allocate `bytes` on `device` from its pool (contents unspecified).
    pub fn alloc(&self, device: Device, bytes: usize) -> Result<ClBuffer> {
        self.inner.alloc(device, bytes)
    }

    /// Allocate `bytes` on `device` and zero them (blocking).
    pub fn alloc_zeroed(&self, device: Device, bytes: usize) -> Result<ClBuffer> {
        let buf = self.alloc(device, bytes)?;
        buf.fill(0u8)?;
        Ok(buf)
    }

    /// Allocate a buffer and copy `data` into it (blocking).
    pub fn upload_slice<T: Element>(&self, device: Device, data: &[T]) -> Result<ClBuffer> {
        self.check_dtype(device, T::DTYPE)?;
        let buf = self.alloc(device, std::mem::size_of_val(data))?;
        buf.write_slice(data)?;
        Ok(buf)
    }

    /// An uninitialised OpenCL array of `dtype` and `shape` on `device`.
    pub fn alloc_array(&self, device: Device, dtype: DType, shape: &[usize]) -> Result<Array> {
        self.check_dtype(device, dtype)?;
        let bytes = bridge_core::array::checked_len(shape)?
            .checked_mul(dtype.size_of())
            .ok_or_else(|| BridgeError::invalid_argument("shape", "byte size overflows usize"))?;
        let buf = self.alloc(device, bytes)?;
        Array::from_storage(Box::new(ClStorage::new(buf)), shape.to_vec(), dtype)
    }

    /// Wrap a buffer as an array of `dtype` and `shape`; the byte length must match exactly
    /// ([`BridgeError::ShapeMismatch`] otherwise).
    pub fn wrap_buffer(&self, buffer: ClBuffer, dtype: DType, shape: &[usize]) -> Result<Array> {
        self.check_dtype(buffer.device(), dtype)?;
        let need = bridge_core::array::checked_len(shape)?
            .checked_mul(dtype.size_of())
            .ok_or_else(|| BridgeError::invalid_argument("shape", "byte size overflows usize"))?;
        if need != buffer.len() {
            return Err(BridgeError::shape_mismatch(
                format!("{need} bytes for {dtype} {shape:?}"),
                format!("{} bytes", buffer.len()),
                "OpenClBackend::wrap_buffer",
            ));
        }
        Array::from_storage(Box::new(ClStorage::new(buffer)), shape.to_vec(), dtype)
    }

    /// The buffer of an OpenCL array.
    pub fn buffer(array: &Array) -> Result<&ClBuffer> {
        array
            .storage::<ClStorage>()
            .map(ClStorage::buffer)
            .ok_or_else(|| {
                BridgeError::Unsupported(format!(
                    "the array is {} memory on {}, not OpenCL memory",
                    array.memory_type(),
                    array.device()
                ))
            })
    }

    /// Copy a host array (any layout) to a new OpenCL array on `device` (blocking).
    pub fn upload(&self, host: &HostData, device: Device) -> Result<Array> {
        let array = self.alloc_array(device, host.dtype(), host.shape())?;
        Self::buffer(&array)?.write(0, &host.to_c_bytes())?;
        Ok(array)
    }

    /// Copy an OpenCL array to a new host array in C order (blocking).
    pub fn download(&self, array: &Array) -> Result<HostData> {
        let buf = Self::buffer(array)?;
        let n = array.len();
        let shape = array.shape().to_vec();
        dispatch_dtype!(array.dtype(), T => {
            let mut v = vec![<T as Default>::default(); n];
            buf.read(0, bytemuck::cast_slice_mut(&mut v[..]))?;
            Ok(<T as HostElement>::wrap(to_array(&shape, v)?))
        })
    }

    /// Start copying a host array to `device`; the OpenCL array comes from [`Pending::wait`].
    pub fn upload_async(&self, host: &HostData, device: Device) -> Result<Pending<Array>> {
        let array = self.alloc_array(device, host.dtype(), host.shape())?;
        let bytes = host.to_c_bytes().into_owned();
        let pending = Self::buffer(&array)?.write_async(0, bytes)?;
        Ok(pending.map(move |_| Ok(array)))
    }

    /// Start copying an OpenCL array to the host; the host array comes from [`Pending::wait`].
    pub fn download_async(&self, array: &Array) -> Result<Pending<HostData>> {
        let buf = Self::buffer(array)?;
        let dtype = array.dtype();
        let shape = array.shape().to_vec();
        let pending = buf.read_async(0, array.nbytes())?;
        Ok(pending.map(move |bytes| HostData::from_c_bytes(dtype, &shape, &bytes)))
    }

    /// Build (or fetch from the cache) a program for `device` from portable source: the
    /// [`PREAMBLE`](crate::PREAMBLE) is prepended and `options` (`-D...` defines) passed to the
    /// compiler. Cached by (device, source hash, options); a failed build returns
    /// [`BridgeError::KernelCompile`] with the compiler's log.
    pub fn program(
        &self,
        device: Device,
        name: &str,
        source: &str,
        options: &[&str],
    ) -> Result<Arc<ClProgram>> {
        let state = self.inner.state(device)?;
        let cache = self.inner.programs(&state);
        ClProgram::build_cached(&state, &cache, name, source, options)
    }

    /// [`program`](Self::program) for a shipped [`KernelSource`].
    pub fn program_from(
        &self,
        device: Device,
        src: &KernelSource,
        options: &[&str],
    ) -> Result<Arc<ClProgram>> {
        self.program(device, src.name, src.source, options)
    }

    /// Wait for every command queued on `device`.
    pub fn synchronize(&self, device: Device) -> Result<()> {
        match self.inner.existing_state(device) {
            Some(s) => raw::finish(&s.queue).map_err(|c| cl_error(device, "clFinish", c, 0)),
            None => self.inner.entry(device).map(|_| ()),
        }
    }

    /// Pool figures of `device` (all zero before the device is first used).
    pub fn pool_stats(&self, device: Device) -> Result<PoolStats> {
        self.inner.entry(device)?;
        Ok(self
            .inner
            .existing_state(device)
            .map(|s| s.pool.stats())
            .unwrap_or_default())
    }
}

fn to_array<T>(shape: &[usize], v: Vec<T>) -> Result<ArrayD<T>> {
    let n = v.len();
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| {
        BridgeError::shape_mismatch(
            format!("{shape:?}"),
            format!("{n} elements ({e})"),
            "download",
        )
    })
}

impl MemoryInfo for OpenClBackend {
    fn memory_stats(&self, device: Device) -> Result<MemoryStats> {
        let entry = self.inner.entry(device)?;
        let pool = self
            .inner
            .existing_state(device)
            .map(|s| s.pool.stats())
            .unwrap_or_default();
        Ok(MemoryStats::from_pool(entry.global_mem, None, &pool))
    }

    fn set_memory_limit(&self, device: Device, limit: Option<MemoryLimit>) -> Result<()> {
        self.inner.state(device)?.pool.set_limit(limit);
        Ok(())
    }
}
