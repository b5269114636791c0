//! The driver FFI: every `unsafe` call into `libcuda` lives here, under small wrappers that check
//! bounds and document what the caller must uphold. Nothing here may be called before
//! [`crate::probe::driver`] succeeded (cudarc panics when `libcuda` is missing).

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use bridge_core::{BridgeError, Device, Result};
use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, result};

use crate::error::{self, BACKEND};

/// Whether `libcuda` can be loaded.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the candidate library names and drops the handles.
    unsafe { sys::is_culib_present() }
}

/// Whether `libnvrtc` can be loaded.
pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the candidate library names and drops the handles.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// `cuInit(0)`, catching the panic cudarc raises when a symbol is missing (too old a driver).
pub(crate) fn init() -> std::result::Result<(), String> {
    match catch_unwind(result::init) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("cuInit failed: {:?}", e.0)),
        Err(_) => Err("the CUDA driver library lacks a required symbol (driver too old?)".into()),
    }
}

/// Run `f`, turning a cudarc panic (missing symbol) into a backend error.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(BridgeError::backend(
            BACKEND,
            None,
            format!("{what}: the CUDA library panicked (missing symbol?)"),
        ))
    })
}

/// `cuDeviceCanAccessPeer`.
pub(crate) fn can_access_peer(a: sys::CUdevice, b: sys::CUdevice) -> bool {
    let mut can = 0;
    // SAFETY: `can` is a valid out-pointer; the devices come from cuDeviceGet.
    let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) };
    r == sys::CUresult::CUDA_SUCCESS && can != 0
}

/// Enable access from `ctx` (made current) to `peer`'s memory; "already enabled" is success.
pub(crate) fn enable_peer_access(
    ctx: &CudaContext,
    peer: &CudaContext,
    device: Device,
) -> Result<()> {
    ctx.bind_to_thread()
        .map_err(error::op(device, "cuCtxSetCurrent"))?;
    // SAFETY: both contexts are live (held by Arcs); flags must be 0.
    let r = unsafe { sys::cuCtxEnablePeerAccess(peer.cu_ctx(), 0) };
    if r == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    error::check(r, device, 0, "cuCtxEnablePeerAccess")
}

/// One `cuMemAlloc` allocation, freed on drop, or a non-owning view of device memory another
/// library allocated (never freed here). The context is kept alive by the handle.
#[derive(Debug)]
pub struct DeviceMem {
    ptr: CUdeviceptr,
    bytes: usize,
    device: Device,
    ctx: Arc<CudaContext>,
    /// Whether this handle allocated the memory (and so frees it on drop).
    owned: bool,
}

impl DeviceMem {
    /// Allocate `bytes` (> 0) on `ctx`'s device. `CUDA_ERROR_OUT_OF_MEMORY` maps to
    /// [`BridgeError::OutOfMemory`].
    pub(crate) fn alloc(ctx: &Arc<CudaContext>, device: Device, bytes: usize) -> Result<DeviceMem> {
        ctx.bind_to_thread()
            .map_err(error::op(device, "cuCtxSetCurrent"))?;
        // SAFETY: the context is current; the memory is uninitialised device memory, which is
        // only ever handed to the driver (never read as Rust values).
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .map_err(|e| error::driver(e, device, bytes as u64, "cuMemAlloc"))?;
        Ok(DeviceMem {
            ptr,
            bytes,
            device,
            ctx: Arc::clone(ctx),
            owned: true,
        })
    }

    /// A non-owning handle on `bytes` of device memory at `ptr` that someone else allocated;
    /// dropping it frees nothing.
    ///
    /// # Safety
    /// `ptr..ptr + bytes` must be device memory usable from `ctx` (on `device`) for as long as
    /// the handle is used; the caller keeps the real owner alive for that long.
    pub(crate) unsafe fn borrowed(
        ctx: &Arc<CudaContext>,
        device: Device,
        ptr: CUdeviceptr,
        bytes: usize,
    ) -> DeviceMem {
        DeviceMem {
            ptr,
            bytes,
            device,
            ctx: Arc::clone(ctx),
            owned: false,
        }
    }

    /// Whether this handle allocated the memory (false for foreign memory).
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// The device address.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The owning context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn range(&self, off: usize, len: usize, what: &str) -> Result<CUdeviceptr> {
        match off.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(self.ptr + off as u64),
            _ => Err(BridgeError::invalid_argument(
                what,
                format!(
                    "range {off}+{len} exceeds a device buffer of {} bytes",
                    self.bytes
                ),
            )),
        }
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        if self.owned && self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed exactly once.
            // Buffers are only dropped after their pending work completed (see CudaStorage).
            let r = unsafe { result::free_sync(self.ptr) };
            if let Err(e) = r {
                log::warn!("cuMemFree on {} failed: {:?}", self.device, e.0);
            }
        }
    }
}

/// Page-locked host memory (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE`, so every context
/// can use it), zero-filled at allocation and freed on drop.
#[derive(Debug)]
pub struct PinnedMem {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the allocation is plain host memory owned by this handle; access goes through
// `&`/`&mut` slices, so Rust's aliasing rules apply as for a `Vec<u8>`.
unsafe impl Send for PinnedMem {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for PinnedMem {}

impl PinnedMem {
    /// Allocate `bytes` (> 0) of pinned memory through `ctx`.
    pub(crate) fn alloc(ctx: &Arc<CudaContext>, device: Device, bytes: usize) -> Result<PinnedMem> {
        ctx.bind_to_thread()
            .map_err(error::op(device, "cuCtxSetCurrent"))?;
        let bytes = bytes.max(1);
        // SAFETY: the context is current; the returned pointer is checked for null and then
        // zero-filled before any slice over it is created.
        let ptr = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(|e| error::driver(e, device, 0, "cuMemHostAlloc"))?
            .cast::<u8>();
        if ptr.is_null() {
            return Err(BridgeError::backend(
                BACKEND,
                None,
                "cuMemHostAlloc returned null",
            ));
        }
        // SAFETY: `ptr` points to `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Ok(PinnedMem {
            ptr,
            bytes,
            ctx: Arc::clone(ctx),
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Always false (allocations are at least one byte).
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is a live, initialised allocation of `bytes` bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

impl Drop for PinnedMem {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc and is freed once; callers synchronise
            // every copy that uses the buffer before dropping it.
            if let Err(e) = unsafe { result::free_host(self.ptr.cast()) } {
                log::warn!("cuMemFreeHost failed: {:?}", e.0);
            }
        }
    }
}

/// Enqueue a host-to-device copy of `src` into `dst[dst_off..]` on `stream`.
///
/// # Safety
/// `src` must stay valid and unmodified until the copy has completed on `stream` when it is
/// pinned memory (the copy is truly asynchronous then). For pageable memory the driver stages
/// the data before returning.
pub(crate) unsafe fn htod_async(
    dst: &DeviceMem,
    dst_off: usize,
    src: &[u8],
    stream: &CudaStream,
) -> Result<()> {
    let d = dst.range(dst_off, src.len(), "htod destination")?;
    if src.is_empty() {
        return Ok(());
    }
    stream
        .context()
        .bind_to_thread()
        .map_err(error::op(dst.device, "cuCtxSetCurrent"))?;
    // SAFETY: `d..d+len` is inside `dst`; the caller upholds the lifetime of `src`.
    unsafe { result::memcpy_htod_async(d, src, stream.cu_stream()) }
        .map_err(error::op(dst.device, "cuMemcpyHtoDAsync"))
}

/// Enqueue a device-to-host copy of `src[src_off..src_off + dst.len()]` into `dst`.
///
/// # Safety
/// `dst` must not be read, written or freed until the copy has completed on `stream`.
pub(crate) unsafe fn dtoh_async(
    dst: &mut [MaybeUninit<u8>],
    src: &DeviceMem,
    src_off: usize,
    stream: &CudaStream,
) -> Result<()> {
    let s = src.range(src_off, dst.len(), "dtoh source")?;
    if dst.is_empty() {
        return Ok(());
    }
    stream
        .context()
        .bind_to_thread()
        .map_err(error::op(src.device, "cuCtxSetCurrent"))?;
    // SAFETY: the source range is inside `src`; the caller upholds exclusive use of `dst`.
    unsafe { result::memcpy_dtoh_async(dst, s, stream.cu_stream()) }
        .map_err(error::op(src.device, "cuMemcpyDtoHAsync"))
}

/// Alignment of the ranges [`with_registered`] page-locks: 64 KiB, a multiple of the host's
/// page size on x86-64 (4 KiB) and on ARM hosts with 64 KiB pages.
pub(crate) const REGISTER_ALIGN: usize = 64 << 10;

/// The page-aligned interior `[a, b)` of `len` bytes at `addr` ([`REGISTER_ALIGN`]): whole
/// pages of that range only, so two disjoint ranges never share a registered page. `a == b`
/// when there is none.
pub(crate) fn aligned_interior(addr: usize, len: usize) -> (usize, usize) {
    let start = addr.next_multiple_of(REGISTER_ALIGN);
    let end = (addr + len) / REGISTER_ALIGN * REGISTER_ALIGN;
    if end <= start {
        (0, 0)
    } else {
        (start - addr, end - addr)
    }
}

/// Runs `f` with the host range `ptr..ptr + len` page-locked by `cuMemHostRegister` (so
/// copies to and from it go at DMA speed with no staging), then waits for `stream` and
/// unregisters the range, whatever `f` returned (a copy `f` queued on `stream` before failing
/// has completed before the range is unregistered and the caller's borrow ends). `f` must
/// queue every copy that uses the range on `stream`. `read_only`: the device only reads the
/// range (a host→device copy): registered with `CU_MEMHOSTREGISTER_READ_ONLY` where the driver
/// takes it (no write access is asked of a read-only or copy-on-write mapping), else plainly.
/// The range must be [`REGISTER_ALIGN`]-aligned in address and length (see
/// [`aligned_interior`]). Returns `Ok(None)` without calling `f` when the range is not aligned
/// or the driver refuses the registration (memory it cannot lock, a range already registered
/// by another copy): the caller then copies another way.
///
/// # Safety
/// `ptr..ptr + len` must be memory of this process that stays allocated until this returns
/// (a live borrow the caller holds).
pub(crate) unsafe fn with_registered<T>(
    (ctx, device, stream): (&Arc<CudaContext>, Device, &CudaStream),
    (ptr, len): (*const u8, usize),
    read_only: bool,
    f: impl FnOnce() -> Result<T>,
) -> Result<Option<T>> {
    let addr = ptr as usize;
    if len == 0 || !addr.is_multiple_of(REGISTER_ALIGN) || !len.is_multiple_of(REGISTER_ALIGN) {
        return Ok(None);
    }
    ctx.bind_to_thread()
        .map_err(error::op(device, "cuCtxSetCurrent"))?;
    let p = ptr.cast_mut().cast::<c_void>();
    let register = |flags: u32| {
        // SAFETY: the range is live memory of this process (the caller's contract);
        // registration only page-locks it (no access through `p`) and is undone below before
        // this returns.
        unsafe { sys::cuMemHostRegister_v2(p, len, flags) }
    };
    let mut r = if read_only {
        register(sys::CU_MEMHOSTREGISTER_READ_ONLY)
    } else {
        register(0)
    };
    if read_only && r != sys::CUresult::CUDA_SUCCESS {
        r = register(0);
    }
    if r != sys::CUresult::CUDA_SUCCESS {
        log::debug!("cuMemHostRegister of {len} bytes refused ({r:?}); staging instead");
        return Ok(None);
    }
    let out = f();
    // every copy `f` queued has completed before the range is unregistered, on error too
    let waited = stream
        .synchronize()
        .map_err(error::op(device, "cuStreamSynchronize"));
    // SAFETY: `p` was registered just above and the stream that used it has drained.
    let u = unsafe { sys::cuMemHostUnregister(p) };
    if u != sys::CUresult::CUDA_SUCCESS {
        log::warn!("cuMemHostUnregister failed: {u:?}");
    }
    let out = out?;
    waited?;
    Ok(Some(out))
}

/// Initialised bytes seen as possibly-uninitialised ones, as copy destinations: writing
/// initialised bytes through the view keeps them initialised.
pub(crate) fn as_uninit(bytes: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`; the view only allows writes of whole
    // (initialised) bytes, so the underlying `[u8]` stays valid.
    unsafe { &mut *(bytes as *mut [u8] as *mut [MaybeUninit<u8>]) }
}

/// Bytes of a `Vec`'s spare capacity, for a copy that fills them before `set_len`.
pub(crate) fn spare_bytes<T: bytemuck::Pod>(v: &mut Vec<T>) -> &mut [MaybeUninit<u8>] {
    let spare = v.spare_capacity_mut();
    let len = std::mem::size_of_val(spare);
    // SAFETY: the spare capacity is `len` bytes of memory owned by the vector and not aliased;
    // `MaybeUninit<u8>` makes no claim about its contents and has alignment 1.
    unsafe { std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<MaybeUninit<u8>>(), len) }
}

/// Synchronous host-to-device copy (enqueued on `stream`, which is then synchronised).
pub(crate) fn htod_sync(
    dst: &DeviceMem,
    dst_off: usize,
    src: &[u8],
    stream: &CudaStream,
) -> Result<()> {
    // SAFETY: the stream is synchronised before `src`'s borrow ends.
    unsafe { htod_async(dst, dst_off, src, stream)? };
    stream
        .synchronize()
        .map_err(error::op(dst.device, "cuStreamSynchronize"))
}

/// Synchronous device-to-host copy (enqueued on `stream`, which is then synchronised).
pub(crate) fn dtoh_sync(
    dst: &mut [MaybeUninit<u8>],
    src: &DeviceMem,
    src_off: usize,
    stream: &CudaStream,
) -> Result<()> {
    // SAFETY: the stream is synchronised before `dst`'s borrow ends.
    unsafe { dtoh_async(dst, src, src_off, stream)? };
    stream
        .synchronize()
        .map_err(error::op(src.device, "cuStreamSynchronize"))
}

/// Enqueue a device-to-device copy within one context.
pub(crate) fn dtod_async(
    dst: &DeviceMem,
    dst_off: usize,
    src: &DeviceMem,
    src_off: usize,
    len: usize,
    stream: &CudaStream,
) -> Result<()> {
    let d = dst.range(dst_off, len, "dtod destination")?;
    let s = src.range(src_off, len, "dtod source")?;
    if len == 0 {
        return Ok(());
    }
    stream
        .context()
        .bind_to_thread()
        .map_err(error::op(dst.device, "cuCtxSetCurrent"))?;
    // SAFETY: both ranges are inside live device allocations; device memory is never
    // observed by Rust code directly.
    unsafe { result::memcpy_dtod_async(d, s, len, stream.cu_stream()) }
        .map_err(error::op(dst.device, "cuMemcpyDtoDAsync"))
}

/// Enqueue a copy between two devices' memory (`cuMemcpyPeerAsync`) on `stream`.
pub(crate) fn peer_async(
    dst: &DeviceMem,
    src: &DeviceMem,
    len: usize,
    stream: &CudaStream,
) -> Result<()> {
    let d = dst.range(0, len, "peer destination")?;
    let s = src.range(0, len, "peer source")?;
    if len == 0 {
        return Ok(());
    }
    stream
        .context()
        .bind_to_thread()
        .map_err(error::op(dst.device, "cuCtxSetCurrent"))?;
    // SAFETY: both ranges are inside live allocations of their contexts.
    unsafe {
        result::memcpy_peer_async(
            dst.ctx.cu_ctx(),
            d,
            src.ctx.cu_ctx(),
            s,
            len,
            stream.cu_stream(),
        )
    }
    .map_err(error::op(dst.device, "cuMemcpyPeerAsync"))
}

/// Enqueue a byte fill of the whole of `dst`.
pub(crate) fn memset_async(dst: &DeviceMem, value: u8, stream: &CudaStream) -> Result<()> {
    stream
        .context()
        .bind_to_thread()
        .map_err(error::op(dst.device, "cuCtxSetCurrent"))?;
    // SAFETY: the range is exactly the live allocation.
    let r = unsafe { sys::cuMemsetD8Async(dst.ptr, value, dst.bytes, stream.cu_stream()) };
    error::check(r, dst.device, 0, "cuMemsetD8Async")
}

/// Launch `func` with a prepared parameter array.
///
/// # Safety
/// `params` must hold one pointer per kernel parameter, each pointing to a value of exactly the
/// type the kernel declares, alive until this call returns; every device pointer passed must
/// refer to memory that stays alive until the kernel completes.
pub(crate) unsafe fn launch(
    func: &CudaFunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_mem: u32,
    stream: &CudaStream,
    params: &mut [*mut c_void],
    device: Device,
) -> Result<()> {
    stream
        .context()
        .bind_to_thread()
        .map_err(error::op(device, "cuCtxSetCurrent"))?;
    // SAFETY: upheld by the caller as documented.
    unsafe {
        result::launch_kernel(
            func.cu_function(),
            grid,
            block,
            shared_mem,
            stream.cu_stream(),
            params,
        )
    }
    .map_err(error::op(device, "cuLaunchKernel"))
}

/// `cuDriverGetVersion` (e.g. 13000 for CUDA 13.0).
pub(crate) fn driver_version() -> Option<i32> {
    let mut v = 0;
    // SAFETY: valid out-pointer.
    let r = unsafe { sys::cuDriverGetVersion(&mut v) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
}

/// The byte size of each parameter of `func` (`cuFuncGetParamInfo` for indices 0, 1, … until
/// the driver answers `CUDA_ERROR_INVALID_VALUE`), or `None` when the driver cannot say (older
/// than CUDA 12.4) or `ARRAYBRIDGE_CHECK_PARAMS=0`.
///
/// CUDA 13.0 has no `cuFuncGetParamCount` (13.2 adds it), so finding the count takes one call
/// that fails by design. Callers cache the result per function, so that call happens once per
/// kernel and process; compute-sanitizer reports it as an API error, which is why the
/// harness's sanitizer phase sets `ARRAYBRIDGE_CHECK_PARAMS=0`.
/// Allow `func` to use `bytes` of dynamic shared memory per block (needed above 48 KiB).
pub(crate) fn allow_dynamic_shared(func: &CudaFunction, bytes: u32, device: Device) -> Result<()> {
    let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    // SAFETY: a valid function handle; the attribute takes an int byte count.
    unsafe { sys::cuFuncSetAttribute(func.cu_function(), attr, bytes as i32) }
        .result()
        .map_err(error::op(device, "cuFuncSetAttribute"))
}

pub(crate) fn param_sizes(func: &CudaFunction) -> Option<Vec<usize>> {
    if bridge_core::tuning::usize_knob("ARRAYBRIDGE_CHECK_PARAMS") == Some(0) {
        return None;
    }
    catch_unwind(AssertUnwindSafe(|| {
        let f = func.cu_function();
        let mut sizes = Vec::new();
        for i in 0..4096usize {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: valid function handle and out-pointers; an index past the last parameter
            // returns CUDA_ERROR_INVALID_VALUE.
            let r = unsafe { sys::cuFuncGetParamInfo(f, i, &mut off, &mut size) };
            match r {
                sys::CUresult::CUDA_SUCCESS => sizes.push(size),
                sys::CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
                _ => return None,
            }
        }
        None
    }))
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::{REGISTER_ALIGN, aligned_interior};

    /// The registered interior: whole aligned pages inside the range, none when it has none.
    #[test]
    fn aligned_interior_is_whole_pages_inside_the_range() {
        const A: usize = REGISTER_ALIGN;
        assert_eq!(aligned_interior(A, 4 * A), (0, 4 * A));
        assert_eq!(aligned_interior(A + 1, 4 * A), (A - 1, 4 * A - 1));
        assert_eq!(aligned_interior(A + 1, 2 * A - 2), (0, 0));
        assert_eq!(aligned_interior(3, 0), (0, 0));
        for (addr, len) in [(17usize, 10 * A + 5), (A - 1, 3 * A), (5 * A, A)] {
            let (a, b) = aligned_interior(addr, len);
            assert!(a < b && b <= len, "{addr} {len}");
            assert_eq!((addr + a) % A, 0);
            assert_eq!((b - a) % A, 0);
            assert!(a < A && len - b < A);
        }
    }
}
