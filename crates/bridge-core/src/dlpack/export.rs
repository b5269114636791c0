//! The export half of DLPack exchange: memory handed out as a managed tensor whose
//! `manager_ctx` owns what keeps it alive ([`export_raw`], [`RawParts`]), host arrays exported
//! zero-copy ([`export_host`], [`export_host_shared`], [`export_host_copy`], [`Exported`]),
//! and the registry of live owners by which a tensor arraybridge exported itself is
//! recognised and taken back without a copy. Everything public here is re-exported by
//! [`dlpack`](super), whose module docs describe the semantics.

use std::any::Any;
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use dlpark::ffi::DLDevice;
use dlpark::metadata::Dynamic;
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};

use super::{
    Abi, ConsumerStream, DlpackTensor, ExportOptions, Inner, dl_device, dl_dtype, dl_error,
};
use crate::array::{Array, HostData, HostElement};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{BridgeError, Result};
use crate::planner::TransferKind;

/// The raw parts of memory to export with [`export_raw`].
#[derive(Debug, Clone)]
pub struct RawParts {
    /// Address of element `[0, …, 0]` (host pointer or device address).
    pub data: *mut c_void,
    /// Shape.
    pub shape: Vec<usize>,
    /// Strides in elements.
    pub strides: Vec<isize>,
    /// Element type.
    pub dtype: DType,
    /// The DLPack device.
    pub device: DLDevice,
}

/// The keep-alive owner inside an exported tensor's `manager_ctx`.
struct ExportOwner {
    keep: Mutex<Option<Box<dyn Any + Send + Sync>>>,
}

/// Addresses of live [`ExportOwner`]s: how [`take_back`] recognises a tensor arraybridge
/// exported (an address is in the set exactly while its owner lives).
fn live_owners() -> &'static Mutex<HashSet<usize>> {
    static LIVE: std::sync::OnceLock<Mutex<HashSet<usize>>> = std::sync::OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(HashSet::new()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for ExportOwner {
    fn drop(&mut self) {
        lock(live_owners()).remove(&(self as *const ExportOwner as usize));
    }
}

fn manager_ctx(t: &DlpackTensor) -> *mut c_void {
    // SAFETY: reading a field of a managed tensor we own.
    unsafe {
        match &t.inner {
            Inner::Legacy(m) => (*m.as_ptr()).manager_ctx(),
            Inner::Versioned(m) => (*m.as_ptr()).manager_ctx(),
            // no managed tensor, so never one arraybridge exported
            Inner::Owned { .. } => std::ptr::null_mut(),
        }
    }
}

/// True when `t` was exported by arraybridge from an owned [`Array`], which
/// [`DlpackTensor::into_array`] takes back without a copy.
pub(super) fn manager_ctx_is_ours(t: &DlpackTensor) -> bool {
    let ctx = manager_ctx(t) as usize;
    let live = lock(live_owners());
    if ctx == 0 || !live.contains(&ctx) {
        return false;
    }
    // SAFETY: as in `take_back`: a live owner, kept alive by `t` and the set's lock.
    let owner = unsafe { &*(ctx as *const ExportOwner) };
    lock(&owner.keep)
        .as_ref()
        .is_some_and(|k| k.as_ref().is::<Array>())
}

/// The owner of a tensor arraybridge exported itself, taken back if it is an [`Array`]
/// (the memory is then the array's again; the tensor is released); `Err(tensor)` otherwise.
pub(super) fn take_back(t: DlpackTensor) -> std::result::Result<Array, DlpackTensor> {
    let ctx = manager_ctx(&t) as usize;
    let live = lock(live_owners());
    if ctx == 0 || !live.contains(&ctx) {
        return Err(t);
    }
    // SAFETY: `ctx` is the address of a live `ExportOwner` (in the set, and it cannot be
    // dropped while we hold the set's lock, since its `Drop` takes that lock first); it is
    // owned by `t`, which we hold.
    let owner = unsafe { &*(ctx as *const ExportOwner) };
    let mut keep = lock(&owner.keep);
    let is_array = keep.as_ref().is_some_and(|k| k.as_ref().is::<Array>());
    if !is_array {
        return Err(t);
    }
    let Some(k) = keep.take() else { return Err(t) };
    drop(keep);
    drop(live);
    drop(t); // the deleter frees the descriptor and the now-empty owner
    match k.downcast::<Array>() {
        Ok(a) => Ok(*a),
        Err(_) => unreachable!("checked with `is` above"),
    }
}

fn build<M: ManagedTensorBase>(
    owner: Box<ExportOwner>,
    raw: &RawParts,
    flags: DlpackFlags,
) -> Result<Managed<M>> {
    let shape: Vec<i64> = raw.shape.iter().map(|&d| d as i64).collect();
    let strides: Vec<i64> = raw.strides.iter().map(|&s| s as i64).collect();
    // SAFETY: shape and strides are copied into the allocation (nothing borrowed).
    let prepared = unsafe { Dynamic::new(shape, strides).prepare_unchecked_as::<M>() }
        .map_err(|e| dl_error("metadata", e))?;
    let mut init = prepared.initialize(owner);
    init.set_data(raw.data)
        .set_dtype(dl_dtype(raw.dtype))
        .set_device(raw.device);
    // SAFETY: IS_COPIED is only passed by callers that exported a private copy; READ_ONLY
    // only restricts the consumer.
    unsafe { init.set_flags_unchecked(flags) };
    // SAFETY: data, shape, strides, dtype and device describe memory the owner keeps valid
    // until the deleter runs (the caller's contract for `export_raw`).
    Ok(unsafe { init.finish() })
}

/// Export memory described by `raw`, kept alive by `owner` until the consumer's deleter runs.
/// `copied` sets `IS_COPIED` (versioned ABI): the memory is a private copy made for this
/// export. A read-only legacy export is refused; `opts.stream` is the backend's business (this
/// function ignores it).
///
/// # Safety
/// `raw.data` with `raw.shape`/`raw.strides` addresses valid memory of `raw.dtype` on
/// `raw.device` for as long as `owner` lives, and writable unless `opts.read_only`.
pub unsafe fn export_raw(
    owner: Box<dyn Any + Send + Sync>,
    raw: RawParts,
    opts: &ExportOptions,
    copied: bool,
) -> Result<DlpackTensor> {
    if raw.shape.len() != raw.strides.len() {
        return Err(BridgeError::shape_mismatch(
            format!("{} strides", raw.shape.len()),
            format!("{}", raw.strides.len()),
            "dlpack::export_raw",
        ));
    }
    if opts.abi == Abi::Legacy && opts.read_only {
        return Err(BridgeError::Unsupported(
            "a read-only tensor cannot be exported with the legacy DLPack ABI (it has no \
             READ_ONLY flag); ask for DLPack >= 1.0 (max_version=(1, 0))"
                .into(),
        ));
    }
    let owner = Box::new(ExportOwner {
        keep: Mutex::new(Some(owner)),
    });
    lock(live_owners()).insert(&*owner as *const ExportOwner as usize);
    let mut flags = DlpackFlags::empty();
    if opts.read_only {
        flags |= DlpackFlags::READ_ONLY;
    }
    if copied {
        flags |= DlpackFlags::IS_COPIED;
    }
    match opts.abi {
        Abi::Versioned => DlpackTensor::from_versioned(build(owner, &raw, flags)?),
        Abi::Legacy => DlpackTensor::from_legacy(build(owner, &raw, DlpackFlags::empty())?),
    }
}

/// An export and whether it needed a copy.
#[derive(Debug)]
pub struct Exported {
    /// The tensor to hand to the consumer.
    pub tensor: DlpackTensor,
    /// The data was copied (only for negative strides); `IS_COPIED` is set (versioned ABI).
    pub copied: bool,
}

impl Exported {
    /// How the data moved: zero-copy, or a host copy.
    pub fn kind(&self) -> TransferKind {
        if self.copied {
            TransferKind::HostCopy
        } else {
            TransferKind::ZeroCopy
        }
    }
}

/// Export a host array (see the [module docs](super)): zero-copy unless a stride is negative.
/// Errors for non-host arrays (use `Registry::to_dlpack`) and for a consumer stream.
pub fn export_host(array: Array, opts: &ExportOptions) -> Result<Exported> {
    export_host_owned(Box::new(array), opts)
}

/// [`export_host`] of a shared array: the consumer's deleter drops one reference. Always
/// zero-copy for non-negative strides; a copy (reported) otherwise.
pub fn export_host_shared(array: Arc<Array>, opts: &ExportOptions) -> Result<Exported> {
    export_host_owned(Box::new(array), opts)
}

trait HostOwner: Any + Send + Sync {
    fn array(&self) -> &Array;
}
impl HostOwner for Array {
    fn array(&self) -> &Array {
        self
    }
}
impl HostOwner for Arc<Array> {
    fn array(&self) -> &Array {
        self
    }
}

fn export_host_owned<O: HostOwner>(owner: Box<O>, opts: &ExportOptions) -> Result<Exported> {
    if opts.stream != ConsumerStream::Omitted {
        return Err(BridgeError::invalid_argument(
            "stream",
            format!(
                "{:?} given for host memory: the DLPack protocol takes no stream for CPU arrays",
                opts.stream
            ),
        ));
    }
    let array = owner.array();
    let host = array.host().map_err(|_| {
        BridgeError::Unsupported(format!(
            "export_host: the array is {} memory on {}; use Registry::to_dlpack",
            array.memory_type(),
            array.device()
        ))
    })?;
    if host.strides().iter().any(|&s| s < 0) {
        let copy = crate::with_host_data!(host, a => {
            HostElement::wrap(a.as_standard_layout().into_owned())
        });
        let copy = Array::from_host(copy);
        let raw = host_parts(&copy)?;
        // SAFETY: `raw` describes the copy's ndarray buffer, which the boxed copy keeps alive
        // (moving the Box does not move the buffer).
        let tensor = unsafe { export_raw(Box::new(copy), raw, opts, true)? };
        return Ok(Exported {
            tensor,
            copied: true,
        });
    }
    let raw = host_parts(array)?;
    // SAFETY: `raw` describes the ndarray buffer of `owner`, which the tensor keeps alive.
    let tensor = unsafe { export_raw(owner, raw, opts, false)? };
    Ok(Exported {
        tensor,
        copied: false,
    })
}

/// Export `data`, a host copy made for this export (a consumer asked for `copy=True`, or for
/// the CPU from another device): zero-copy from `data`, with `IS_COPIED` set (versioned ABI).
pub fn export_host_copy(data: HostData, opts: &ExportOptions) -> Result<Exported> {
    let copy = Array::from_host(data);
    if copy.host()?.strides().iter().any(|&s| s < 0) {
        return export_host(copy, opts);
    }
    let raw = host_parts(&copy)?;
    // SAFETY: `raw` describes the copy's ndarray buffer, which the boxed copy keeps alive.
    let tensor = unsafe { export_raw(Box::new(copy), raw, opts, true)? };
    Ok(Exported {
        tensor,
        copied: true,
    })
}

fn host_parts(array: &Array) -> Result<RawParts> {
    let host = array.host()?;
    let data = crate::with_host_data!(host, a => a.as_ptr() as *mut c_void);
    Ok(RawParts {
        data,
        shape: host.shape().to_vec(),
        strides: host.strides().to_vec(),
        dtype: host.dtype(),
        device: dl_device(Device::Cpu),
    })
}
