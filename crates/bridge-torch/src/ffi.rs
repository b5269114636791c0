//! The crate's unsafe code: the C++ shim (`shim/torch_shim.cpp`) and the raw-pointer work of the
//! zero-copy paths, each under a safe wrapper whose comment says why it is sound. (The one other
//! `unsafe` block, in `cuda_interop`, calls bridge-cuda's `CudaStorage::from_foreign`.)
//!
//! It speaks C-level types — tensors, raw pointers, integers — and its own small C-side types:
//! [`Place`] (the shim's device argument), the c10::ScalarType codes, [`HostOwner`] (what a
//! host alias's deleter owns), [`ForeignCudaMemory`] (what a CUDA alias's deleter owns),
//! [`CudaMemory`] (allocator figures). Of bridge-core it uses the dtype and the host ndarray,
//! because soundness depends on reading element types and layouts itself. Of this crate it
//! imports only the error mapping (`error.rs`, which imports nothing of the crate); the
//! conversions to the crate's types (dtype names, storages, precise tensor-view errors) live in
//! the safe modules above it.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use bridge_core::{
    BridgeError, DType, Device, HostData, HostElement, Result, dispatch_dtype, with_host_data,
};
use ndarray::{ArrayD, ArrayViewD, IxDyn, ShapeBuilder};
use tch::Tensor;
use torch_sys::C_tensor;

use crate::error::map_torch_error;

/// Where a tensor lives, as the shim takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Host memory.
    Cpu,
    /// CUDA device N.
    Cuda(usize),
}

impl Place {
    fn args(self) -> (c_int, c_int) {
        match self {
            Place::Cpu => (0, 0),
            Place::Cuda(n) => (1, c_int::try_from(n).unwrap_or(c_int::MAX)),
        }
    }

    /// The arraybridge device (`torch:cpu`, `torch:cuda:N`).
    pub(crate) fn device(self) -> Device {
        match self {
            Place::Cpu => Device::TorchCpu,
            Place::Cuda(n) => Device::TorchCuda(n),
        }
    }
}

/// A libtorch failure on `place` as a [`BridgeError`] (CUDA OOM becomes `OutOfMemory`).
fn torch_error(place: Place, requested: u64, message: &str) -> BridgeError {
    map_torch_error(place.device(), requested, message)
}

/// c10::ScalarType codes of the eight dtypes (stable across libtorch versions; see
/// c10/core/ScalarType.h).
mod code {
    use std::ffi::c_int;

    pub(super) const BYTE: c_int = 0;
    pub(super) const INT: c_int = 3;
    pub(super) const LONG: c_int = 4;
    pub(super) const HALF: c_int = 5;
    pub(super) const FLOAT: c_int = 6;
    pub(super) const DOUBLE: c_int = 7;
    pub(super) const BFLOAT16: c_int = 15;
    pub(super) const UINT16: c_int = 27;
}

/// The c10::ScalarType code torch uses for `dtype`.
pub(crate) fn scalar_type_code(dtype: DType) -> c_int {
    match dtype {
        DType::U8 => code::BYTE,
        DType::U16 => code::UINT16,
        DType::I32 => code::INT,
        DType::I64 => code::LONG,
        DType::F16 => code::HALF,
        DType::BF16 => code::BFLOAT16,
        DType::F32 => code::FLOAT,
        DType::F64 => code::DOUBLE,
    }
}

/// The dtype of a c10::ScalarType code, or `None` for the codes arraybridge has no dtype for.
pub(crate) fn dtype_of_code(st: c_int) -> Option<DType> {
    Some(match st {
        code::BYTE => DType::U8,
        code::UINT16 => DType::U16,
        code::INT => DType::I32,
        code::LONG => DType::I64,
        code::HALF => DType::F16,
        code::BFLOAT16 => DType::BF16,
        code::FLOAT => DType::F32,
        code::DOUBLE => DType::F64,
        _ => return None,
    })
}

/// The ndarray a zero-copy host tensor aliases: the context its storage deleter owns (through an
/// `Arc`). Shared by the array's storage and the tensor; never handed out mutably, so torch's
/// view of the buffer cannot race a Rust reference.
pub(crate) struct HostOwner(HostData);

impl HostOwner {
    /// Wrap an ndarray.
    pub(crate) fn new(data: HostData) -> Self {
        HostOwner(data)
    }
    /// The ndarray (crate-internal: only its layout and base pointer are read).
    pub(crate) fn data(&self) -> &HostData {
        &self.0
    }
    /// Take the ndarray back (only once no tensor aliases it: the `Arc` is unique).
    pub(crate) fn into_data(self) -> HostData {
        self.0
    }
}

/// Device memory owned by another library, which a torch tensor may alias.
///
/// # Safety
///
/// Implementors guarantee that [`device_ptr`](Self::device_ptr) is the address of at least
/// [`nbytes`](Self::nbytes) bytes of device memory on CUDA device
/// [`cuda_ordinal`](Self::cuda_ordinal) (the driver ordinal, which is torch's index), that the
/// memory stays allocated and is not reused while `self` lives, and that once
/// [`synchronize`](Self::synchronize) has returned no pending work of the owner writes it.
pub unsafe trait ForeignCudaMemory: Send + 'static {
    /// Device address.
    fn device_ptr(&self) -> u64;
    /// Size in bytes.
    fn nbytes(&self) -> usize;
    /// CUDA device ordinal.
    fn cuda_ordinal(&self) -> usize;
    /// Block until the owner's pending work on the memory has finished.
    fn synchronize(&self) -> Result<()>;
}

type Deleter = extern "C" fn(*mut c_void);

unsafe extern "C" {
    fn ab_last_error() -> *const c_char;
    fn ab_clear_error();
    fn ab_from_blob(
        data: *mut c_void,
        ndim: i64,
        sizes: *const i64,
        strides: *const i64,
        scalar_type: c_int,
        device_type: c_int,
        device_index: c_int,
        deleter: Deleter,
        ctx: *mut c_void,
    ) -> *mut c_void;
    fn ab_scalar_type(t: *const c_void) -> c_int;
    fn ab_copy(dst: *mut c_void, src: *const c_void, non_blocking: c_int) -> c_int;
    fn ab_to_device(
        src: *const c_void,
        device_type: c_int,
        device_index: c_int,
        non_blocking: c_int,
    ) -> *mut c_void;
    fn ab_pin_memory(src: *const c_void) -> *mut c_void;
    fn ab_is_pinned(t: *const c_void) -> c_int;
    fn ab_cuda_load_state(err: *mut *const c_char) -> c_int;
    fn ab_cuda_device_count() -> c_int;
    fn ab_cuda_memory(
        device_index: c_int,
        allocated: *mut u64,
        reserved: *mut u64,
        free_bytes: *mut u64,
        total_bytes: *mut u64,
    ) -> c_int;
    fn ab_cuda_empty_cache() -> c_int;
    fn ab_cuda_synchronize(device_index: c_int) -> c_int;
    fn ab_cuda_uuid(ordinal: c_int, out16: *mut u8) -> c_int;
}

/// The shim's last error message on this thread (cleared after reading).
fn last_error() -> String {
    // SAFETY: ab_last_error returns a pointer to a thread-local std::string's NUL-terminated
    // buffer, valid until the next shim call on this thread; it is copied out at once.
    let msg = unsafe { CStr::from_ptr(ab_last_error()) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: no arguments; clears the thread-local buffer.
    unsafe { ab_clear_error() };
    if msg.is_empty() {
        "unknown libtorch error".to_owned()
    } else {
        msg
    }
}

/// Wrap a tensor pointer returned by the shim, or read the error.
fn wrap(raw: *mut c_void, place: Place, what: &str) -> Result<Tensor> {
    if raw.is_null() {
        return Err(torch_error(place, 0, &format!("{what}: {}", last_error())));
    }
    // SAFETY: a non-null result of the shim is a fresh `new at::Tensor`, the object torch-sys's
    // `tensor` handle points to; tch::Tensor takes ownership and deletes it on drop (at_free).
    Ok(unsafe { Tensor::from_ptr(raw.cast::<C_tensor>()) })
}

fn raw(t: &Tensor) -> *const c_void {
    t.as_ptr().cast::<c_void>()
}

fn dims_i64(shape: &[usize]) -> Result<Vec<i64>> {
    shape
        .iter()
        .map(|&d| {
            i64::try_from(d)
                .map_err(|_| BridgeError::invalid_argument("shape", format!("{d} overflows i64")))
        })
        .collect()
}

/// The raw c10::ScalarType code of a tensor (works for every dtype, unlike `Tensor::kind`).
pub(crate) fn scalar_type(t: &Tensor) -> Result<c_int> {
    // SAFETY: `t` is a live tch tensor; the shim only reads its dtype.
    let st = unsafe { ab_scalar_type(raw(t)) };
    if st < 0 {
        return Err(torch_error(Place::Cpu, 0, &last_error()));
    }
    Ok(st)
}

extern "C" fn drop_host_owner(ctx: *mut c_void) {
    // SAFETY: ctx is the pointer `Arc::into_raw` produced in `alias_host`, handed to torch, which
    // calls this deleter exactly once, when the last reference to the tensor storage goes.
    drop(unsafe { Arc::from_raw(ctx.cast_const().cast::<HostOwner>()) });
}

extern "C" fn no_delete(_ctx: *mut c_void) {}

/// A CPU tensor that aliases the ndarray held by `owner`, with the ndarray's own strides, or
/// `None` when a stride is negative (torch strides cannot be). The tensor's storage holds an
/// `Arc` clone of `owner`, so the buffer outlives every tensor that views it, shallow clones
/// and views included.
pub(crate) fn alias_host(owner: &Arc<HostOwner>) -> Result<Option<Tensor>> {
    let data = owner.data();
    let dtype = data.dtype();
    if data.strides().iter().any(|&s| s < 0) {
        return Ok(None);
    }
    let sizes = dims_i64(data.shape())?;
    let strides: Vec<i64> = data.strides().iter().map(|&s| s as i64).collect();
    let ptr: *mut c_void = with_host_data!(data, a => a.as_ptr().cast_mut().cast::<c_void>());
    let ctx = Arc::into_raw(Arc::clone(owner)).cast_mut().cast::<c_void>();
    let (dt, di) = Place::Cpu.args();
    // SAFETY: `ptr` is the ndarray's first logical element; with the ndarray's own non-negative
    // element strides and shape, every address the tensor can reach lies inside the ndarray's
    // allocation, which is owned by `*owner` and never moves or is handed out mutably while
    // shared (HostOwner gives out no `&mut`). The Arc clone in `ctx` keeps it alive until torch
    // runs the deleter; on failure the shim does not run the deleter and we take `ctx` back.
    let raw = unsafe {
        ab_from_blob(
            ptr,
            sizes.len() as i64,
            sizes.as_ptr(),
            strides.as_ptr(),
            scalar_type_code(dtype),
            dt,
            di,
            drop_host_owner,
            ctx,
        )
    };
    if raw.is_null() {
        // SAFETY: torch did not take ownership of ctx (see ab_from_blob); reclaim the Arc.
        drop(unsafe { Arc::from_raw(ctx.cast_const().cast::<HostOwner>()) });
    }
    wrap(raw, Place::Cpu, "torch from_blob").map(Some)
}

/// Whether `t` still views exactly the ndarray in `owner` (same base pointer, shape, strides
/// and dtype).
pub(crate) fn aliases(t: &Tensor, owner: &HostOwner) -> bool {
    let d = owner.data();
    let base: *const c_void = with_host_data!(d, a => a.as_ptr().cast::<c_void>());
    let strides: Vec<i64> = d.strides().iter().map(|&s| s as i64).collect();
    let sizes: Vec<i64> = d.shape().iter().map(|&s| s as i64).collect();
    t.data_ptr().cast_const() == base
        && t.size() == sizes
        && t.stride() == strides
        && scalar_type(t).ok() == Some(scalar_type_code(d.dtype()))
}

/// A fresh standard-layout host array with the (logical) contents of `src` (any device, any
/// strides), copied by torch. `dtype` must be the tensor's dtype.
pub(crate) fn copy_to_host(src: &Tensor, dtype: DType) -> Result<HostData> {
    let shape: Vec<usize> = src
        .size()
        .iter()
        .map(|&d| usize::try_from(d).unwrap_or(0))
        .collect();
    let n = bridge_core::array::checked_len(&shape)?;
    let sizes = dims_i64(&shape)?;
    let strides: Vec<i64> = bridge_core::array::c_strides(&shape)
        .iter()
        .map(|&s| s as i64)
        .collect();
    dispatch_dtype!(dtype, T => {
        let mut v: Vec<T> = Vec::with_capacity(n);
        let ptr = if n == 0 {
            NonNull::<T>::dangling().as_ptr()
        } else {
            v.as_mut_ptr()
        };
        let (dt, di) = Place::Cpu.args();
        // SAFETY: `ptr` addresses `n` elements of capacity (or is a dangling, aligned pointer for
        // an empty array that torch never dereferences); the C-order strides keep every access
        // inside them. The tensor borrows `v` only inside this block (it is dropped before `v`
        // is used) and has a no-op deleter.
        let dst_raw = unsafe {
            ab_from_blob(
                ptr.cast::<c_void>(),
                sizes.len() as i64,
                sizes.as_ptr(),
                strides.as_ptr(),
                scalar_type_code(dtype),
                dt,
                di,
                no_delete,
                std::ptr::null_mut(),
            )
        };
        let dst = wrap(dst_raw, Place::Cpu, "torch from_blob")?;
        // SAFETY: both are live tensors of the same dtype and shape; copy_ writes only `dst`.
        let rc = unsafe { ab_copy(dst.as_ptr().cast_mut().cast::<c_void>(), raw(src), 0) };
        drop(dst);
        if rc != 0 {
            return Err(torch_error(device_place(src), n as u64 * dtype.size_of() as u64, &last_error()));
        }
        // SAFETY: copy_ (blocking) wrote all `n` elements of the C-contiguous destination, and
        // every bit pattern is a valid value of the plain-data element types.
        unsafe { v.set_len(n) };
        let a = ArrayD::from_shape_vec(IxDyn(&shape), v).map_err(|e| {
            BridgeError::shape_mismatch(format!("{shape:?}"), e.to_string(), "torch copy_to_host")
        })?;
        Ok(T::wrap(a))
    })
}

/// Where a tensor lives.
pub(crate) fn device_place(t: &Tensor) -> Place {
    match t.device() {
        tch::Device::Cuda(n) => Place::Cuda(n),
        _ => Place::Cpu,
    }
}

/// Borrow a CPU tensor's elements as an ndarray view (no copy). The caller reports a dtype or
/// device mismatch precisely (`storage::tensor_view`); they are checked again here because
/// soundness depends on them.
pub(crate) fn view<T: HostElement>(t: &Tensor) -> Result<ArrayViewD<'_, T>> {
    if scalar_type(t)? != scalar_type_code(T::DTYPE) || device_place(t) != Place::Cpu {
        return Err(BridgeError::Unsupported(format!(
            "tensor_view needs a CPU tensor of {}",
            T::DTYPE
        )));
    }
    let shape: Vec<usize> = t.size().iter().map(|&d| d.max(0) as usize).collect();
    let strides: Vec<usize> = t.stride().iter().map(|&s| s.max(0) as usize).collect();
    let n = bridge_core::array::checked_len(&shape)?;
    let ptr = t.data_ptr().cast::<T>();
    let ptr = if n == 0 || ptr.is_null() {
        NonNull::<T>::dangling().as_ptr()
    } else {
        ptr
    };
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
        return Err(BridgeError::Unsupported(
            "tensor_view: the tensor's data is not aligned for its element type".into(),
        ));
    }
    // SAFETY: the tensor is a dense CPU tensor of element type T (checked above); `data_ptr`
    // already includes the storage offset, torch strides are non-negative, and torch guarantees
    // every (shape, strides) index is inside the storage, which the borrowed `&'a Tensor` keeps
    // alive for 'a. Every bit pattern is a valid T (plain data). An empty tensor gets an aligned
    // dangling pointer that is never read.
    Ok(unsafe { ArrayViewD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), ptr) })
}

/// A contiguous copy of `src` on `place` (same dtype).
pub(crate) fn to_device(src: &Tensor, place: Place, non_blocking: bool) -> Result<Tensor> {
    let (dt, di) = place.args();
    // SAFETY: `src` is a live tensor; the shim returns a new tensor or NULL.
    let raw = unsafe { ab_to_device(raw(src), dt, di, c_int::from(non_blocking)) };
    if raw.is_null() {
        let bytes = src.numel() as u64 * scalar_type_of_size(src);
        return Err(torch_error(
            place,
            bytes,
            &format!("torch to(device): {}", last_error()),
        ));
    }
    wrap(raw, place, "torch to(device)")
}

/// The element size of a tensor's dtype, for error messages (1 when it has no dtype).
fn scalar_type_of_size(t: &Tensor) -> u64 {
    if !t.defined() {
        return 1;
    }
    scalar_type(t)
        .ok()
        .and_then(dtype_of_code)
        .map(|d| d.size_of() as u64)
        .unwrap_or(1)
}

/// A pinned, contiguous host copy of a CPU tensor.
pub(crate) fn pin_memory(src: &Tensor) -> Result<Tensor> {
    // SAFETY: `src` is a live tensor; the shim returns a new tensor or NULL.
    let raw = unsafe { ab_pin_memory(raw(src)) };
    wrap(raw, Place::Cpu, "torch pin_memory")
}

/// Whether a tensor's memory is pinned.
pub(crate) fn is_pinned(t: &Tensor) -> bool {
    // SAFETY: `t` is a live tensor; read only.
    unsafe { ab_is_pinned(raw(t)) == 1 }
}

/// Whether libtorch_cuda.so was loaded at program start (by the shim's static initialiser),
/// or why not.
pub(crate) fn cuda_load_state() -> std::result::Result<(), String> {
    let mut err: *const c_char = std::ptr::null();
    // SAFETY: `err` is a valid out-pointer; the shim stores a pointer to a static string.
    let rc = unsafe { ab_cuda_load_state(&mut err) };
    if rc == 0 {
        return Ok(());
    }
    if err.is_null() {
        return Err("libtorch_cuda.so was not loaded".to_owned());
    }
    // SAFETY: `err` points to the shim's static std::string, NUL-terminated, written once at
    // program start and never modified afterwards.
    Err(unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned())
}

/// Number of CUDA devices torch sees.
pub(crate) fn cuda_device_count() -> std::result::Result<usize, String> {
    // SAFETY: no arguments; exceptions are caught in the shim.
    let n = unsafe { ab_cuda_device_count() };
    usize::try_from(n).map_err(|_| last_error())
}

/// Allocator figures of CUDA device `n`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CudaMemory {
    pub(crate) allocated: u64,
    pub(crate) reserved: u64,
    pub(crate) free: u64,
    pub(crate) total: u64,
}

/// Allocator figures of CUDA device `n` (`None` when torch has no CUDA).
pub(crate) fn cuda_memory(n: usize) -> std::result::Result<Option<CudaMemory>, String> {
    let mut m = CudaMemory::default();
    let idx = c_int::try_from(n).map_err(|e| e.to_string())?;
    // SAFETY: the four out-pointers are valid, distinct u64 locations for the call.
    let rc = unsafe {
        ab_cuda_memory(
            idx,
            &mut m.allocated,
            &mut m.reserved,
            &mut m.free,
            &mut m.total,
        )
    };
    match rc {
        0 => Ok(Some(m)),
        1 => Ok(None),
        _ => Err(last_error()),
    }
}

/// Empty torch's CUDA caching allocator. `Ok(false)` when torch has no CUDA.
pub(crate) fn cuda_empty_cache() -> std::result::Result<bool, String> {
    // SAFETY: no arguments; exceptions are caught in the shim.
    match unsafe { ab_cuda_empty_cache() } {
        0 => Ok(true),
        1 => Ok(false),
        _ => Err(last_error()),
    }
}

/// Wait for all work on CUDA device `n`.
pub(crate) fn cuda_synchronize(n: usize) -> std::result::Result<(), String> {
    let idx = c_int::try_from(n).map_err(|e| e.to_string())?;
    // SAFETY: plain integer argument; exceptions are caught in the shim.
    match unsafe { ab_cuda_synchronize(idx) } {
        0 => Ok(()),
        1 => Err("torch has no CUDA backend".to_owned()),
        _ => Err(last_error()),
    }
}

/// The 16-byte UUID of CUDA device `n` (driver API).
pub(crate) fn cuda_uuid(n: usize) -> std::result::Result<[u8; 16], String> {
    let idx = c_int::try_from(n).map_err(|e| e.to_string())?;
    let mut out = [0u8; 16];
    // SAFETY: `out` has room for the 16 bytes the shim writes.
    match unsafe { ab_cuda_uuid(idx, out.as_mut_ptr()) } {
        0 => Ok(out),
        _ => Err(last_error()),
    }
}

/// What torch's deleter owns for a foreign CUDA alias: the owner (held only to be dropped).
struct ForeignBox<M> {
    _mem: M,
    ordinal: usize,
}

extern "C" fn drop_foreign<M: ForeignCudaMemory>(ctx: *mut c_void) {
    // SAFETY: ctx is the `Box::into_raw` of `alias_cuda::<M>`, handed to torch, which calls
    // this deleter exactly once, when the last reference to the tensor storage goes.
    let owner = unsafe { Box::from_raw(ctx.cast::<ForeignBox<M>>()) };
    // Torch work that used the memory may still be queued on torch's streams: finish it before
    // the owner gives the memory back to its library.
    if let Err(e) = cuda_synchronize(owner.ordinal) {
        log::warn!(
            "torch: synchronising cuda:{} before releasing foreign memory failed: {e}",
            owner.ordinal
        );
    }
    drop(owner);
}

/// A CUDA tensor (C order) over device memory owned by `mem`, which torch keeps alive (and
/// drops, after synchronising the device, when the last tensor reference goes).
pub(crate) fn alias_cuda<M: ForeignCudaMemory>(
    mem: M,
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    let n = bridge_core::array::checked_len(shape)?;
    let need = n.saturating_mul(dtype.size_of());
    if need > mem.nbytes() {
        return Err(BridgeError::shape_mismatch(
            format!("at least {need} bytes for {dtype} {shape:?}"),
            format!("{} bytes of foreign CUDA memory", mem.nbytes()),
            "bridge_torch::tensor_from_foreign_cuda",
        ));
    }
    let ordinal = mem.cuda_ordinal();
    let place = Place::Cuda(ordinal);
    mem.synchronize()?;
    let ptr = mem.device_ptr() as usize as *mut c_void;
    let sizes = dims_i64(shape)?;
    let strides: Vec<i64> = bridge_core::array::c_strides(shape)
        .iter()
        .map(|&s| s as i64)
        .collect();
    let (dt, di) = place.args();
    let ctx = Box::into_raw(Box::new(ForeignBox { _mem: mem, ordinal })).cast::<c_void>();
    // SAFETY: by the `ForeignCudaMemory` contract, `ptr` addresses at least `nbytes` bytes of
    // device memory on CUDA device `ordinal`, valid while the owner lives; the C-order layout
    // of `shape` needs `need <= nbytes` bytes (checked). The owner's pending work is finished
    // (synchronize above). The box in `ctx` is released by `drop_foreign` when torch lets go;
    // on failure the shim does not run the deleter and we take the box back.
    let raw = unsafe {
        ab_from_blob(
            ptr,
            sizes.len() as i64,
            sizes.as_ptr(),
            strides.as_ptr(),
            scalar_type_code(dtype),
            dt,
            di,
            drop_foreign::<M>,
            ctx,
        )
    };
    if raw.is_null() {
        // SAFETY: torch did not take ownership of ctx; reclaim the box.
        drop(unsafe { Box::from_raw(ctx.cast::<ForeignBox<M>>()) });
    }
    wrap(raw, place, "torch from_blob (CUDA)")
}
