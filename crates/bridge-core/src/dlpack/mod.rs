//! DLPack exchange, on the [`dlpark`] crate: tensors in and out of arraybridge without copies.
//!
//! A [`DlpackTensor`] owns one DLPack managed tensor of either ABI — the versioned one
//! (`DLManagedTensorVersioned`, DLPack ≥ 1.0, with its flags) or the legacy one
//! (`DLManagedTensor`) that older producers and consumers speak — and calls the producer's
//! deleter exactly once, when it is dropped; or host memory described in place by a caller that
//! read another library's array without a DLPack exchange, kept alive by an owner it drops
//! ([`DlpackTensor::from_host_owner`]: the Python package's NumPy fast path). Construction validates the descriptor
//! ([`TensorInfo`]: shape, element strides, [`DType`], [`Device`], read-only flag) and rejects
//! what arraybridge cannot represent (a dtype outside its eight, a device it has no backend for)
//! with a typed error, releasing the tensor.
//!
//! # Export
//! - [`export_host`] hands a host [`Array`] out **zero-copy**: the DLPack data pointer is the
//!   ndarray's, strides are the ndarray's (any non-negative strides, so views and transposes
//!   stay zero-copy), and the array itself becomes the owner that the consumer's deleter
//!   releases. Arrays with negative strides are copied to row-major order first, and the copy
//!   is flagged `IS_COPIED` (versioned ABI) and reported in [`Exported::copied`].
//! - [`DlpackTensor::reexport`] hands an imported tensor out again (zero-copy, the imported
//!   tensor stays alive until the last consumer's deleter runs; a read-only tensor stays
//!   read-only).
//! - [`export_raw`] is the building block backends use for their own memory (bridge-cuda's
//!   `dlpack` module exports CUDA buffers with it).
//! - [`ExportOptions::read_only`] sets `READ_ONLY`; the legacy ABI cannot carry that flag, so a
//!   read-only legacy export is refused ([`BridgeError::Unsupported`]) rather than silently
//!   made writable.
//!
//! The export functions, [`Exported`] and [`RawParts`] are in `dlpack/export.rs` (re-exported
//! here); [`DlpackTensor::reexport`] and [`ExportOptions`] stay with the tensor in `mod.rs`.
//!
//! # Import
//! - Host tensors are read **in place** through [`DlpackTensor::view`] (any strides, negative
//!   included); [`DlpackTensor::view_mut`] refuses read-only tensors.
//! - [`DlpackTensor::into_array`] turns a tensor into an owned [`Array`]: a tensor arraybridge
//!   exported itself comes back zero-copy (its owner is taken back); a foreign host tensor is
//!   copied (an ndarray owns its memory, so it cannot adopt the producer's), which the
//!   registry's conversion record reports as a `host-copy` step. Device tensors (CUDA) are
//!   wrapped in place by the backend's [`DlpackExchange`]; see [`crate::convert`]'s
//!   `Registry::from_dlpack` / `Registry::to_dlpack`, the DLPack route of the planner.
//!
//! # Lifetimes
//! The owner of exported memory lives inside the DLPack tensor (its `manager_ctx`) and is
//! dropped only by the deleter, so it cannot dangle whatever the consumer does first: the
//! registry, the backend or the original variable may be gone. The deleter may run on any
//! thread. Each export is a fresh managed tensor with its own deleter; DLPack consumers call
//! it once (dlpark renames Python capsules once consumed, so a capsule cannot be consumed twice).
//!
//! # Streams
//! Host memory has no stream: an export request naming a consumer stream for a host array is an
//! error ([`ConsumerStream`]). For CUDA memory the producer makes the consumer's stream wait on
//! an event recorded after its own work (never a device-wide synchronisation); see
//! bridge-cuda's `dlpack` module.
//!
//! ```
//! use bridge_core::dlpack::{export_host, Abi, DlpackTensor, ExportOptions};
//! use bridge_core::{Array, DType, Device};
//! use ndarray::ArrayD;
//!
//! let a = ArrayD::<f32>::from_shape_fn(vec![2, 3], |i| (i[0] * 3 + i[1]) as f32);
//! let ptr = a.as_ptr() as usize;
//! let out = export_host(Array::from_ndarray(a), &ExportOptions::default())?;
//! assert!(!out.copied);
//! let t: DlpackTensor = out.tensor;
//! assert_eq!((t.info().dtype, t.info().device, t.info().abi), (DType::F32, Device::Cpu, Abi::Versioned));
//! assert_eq!(t.info().data, ptr); // zero-copy
//! assert_eq!(t.view::<f32>()?[[1, 2]], 5.0);
//! // Back into an Array: ours, so the owner is taken back without a copy.
//! let (back, copied) = t.into_array()?;
//! assert!(!copied);
//! assert_eq!(back.as_ndarray::<f32>()?.as_ptr() as usize, ptr);
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```

mod export;
pub mod route;

use std::any::Any;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

pub use dlpark;
use dlpark::ffi::{
    DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned,
};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use ndarray::{ArrayViewD, ArrayViewMutD, IxDyn, ShapeBuilder};

use crate::array::{Array, HostData, HostElement, c_strides, checked_len};
use crate::device::{Device, MemoryType};
use crate::dtype::DType;
use crate::error::{BridgeError, Result};
use crate::planner::TransferKind;

pub use export::{
    Exported, RawParts, export_host, export_host_copy, export_host_shared, export_raw,
};
use export::{manager_ctx_is_ours, take_back};
pub use route::DlpackImport;

/// Which DLPack ABI a managed tensor uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Abi {
    /// `DLManagedTensor` (DLPack < 1.0; Python capsule name `dltensor`): no version, no flags.
    Legacy,
    /// `DLManagedTensorVersioned` (DLPack ≥ 1.0; capsule `dltensor_versioned`): version and
    /// flags (`READ_ONLY`, `IS_COPIED`).
    Versioned,
}

/// The consumer stream of an export request (the `stream` argument of Python's
/// `__dlpack__`), as the DLPack protocol encodes it for CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsumerStream {
    /// No stream was given: CPU memory, or the legacy default stream for CUDA.
    #[default]
    Omitted,
    /// `-1`: the consumer synchronises itself; the producer must not.
    NoSync,
    /// `1`: CUDA's legacy default stream.
    LegacyDefault,
    /// `2`: CUDA's per-thread default stream.
    PerThreadDefault,
    /// A `cudaStream_t` / `CUstream` handle.
    Handle(usize),
}

impl ConsumerStream {
    /// Decode the protocol's integer (`None` = omitted). `0` is ambiguous for CUDA and
    /// refused, as are other negative values.
    pub fn from_protocol(value: Option<i64>) -> Result<ConsumerStream> {
        match value {
            None => Ok(ConsumerStream::Omitted),
            Some(-1) => Ok(ConsumerStream::NoSync),
            Some(1) => Ok(ConsumerStream::LegacyDefault),
            Some(2) => Ok(ConsumerStream::PerThreadDefault),
            Some(v) if v > 2 => usize::try_from(v)
                .map(ConsumerStream::Handle)
                .map_err(|_| BridgeError::invalid_argument("stream", "handle does not fit")),
            Some(v) => Err(BridgeError::invalid_argument(
                "stream",
                format!(
                    "{v} is not a DLPack stream (CUDA takes -1, 1, 2 or a stream handle; 0 is \
                     ambiguous)"
                ),
            )),
        }
    }
}

/// How to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportOptions {
    /// The ABI of the managed tensor.
    pub abi: Abi,
    /// Set `READ_ONLY` (versioned ABI only; refused with the legacy ABI).
    pub read_only: bool,
    /// The consumer's stream (must be [`ConsumerStream::Omitted`] for host memory).
    pub stream: ConsumerStream,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            abi: Abi::Versioned,
            read_only: false,
            stream: ConsumerStream::Omitted,
        }
    }
}

impl ExportOptions {
    /// The ABI a Python consumer asked for with `max_version`: versioned for `(1, _)` or
    /// later, legacy when omitted or `(0, _)` (the Python array API's rule).
    pub fn abi_for_max_version(max_version: Option<(u32, u32)>) -> Abi {
        match max_version {
            Some((major, _)) if major >= 1 => Abi::Versioned,
            _ => Abi::Legacy,
        }
    }
}

/// What a validated DLPack descriptor says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TensorInfo {
    /// Shape.
    pub shape: Vec<usize>,
    /// Strides in elements (explicit, or row-major when the producer left them out).
    pub strides: Vec<isize>,
    /// Element type.
    pub dtype: DType,
    /// Where the memory is (`cpu` for host and pinned host memory, `cuda:N`, `opencl:N`).
    pub device: Device,
    /// The raw DLPack device `(device_type, device_id)`.
    pub dl_device: (u32, i32),
    /// `READ_ONLY` was set (versioned ABI).
    pub read_only: bool,
    /// `IS_COPIED` was set (versioned ABI): the producer made a copy for this export.
    pub is_copied: bool,
    /// The ABI.
    pub abi: Abi,
    /// Address of element `[0, …, 0]` (data pointer plus byte offset).
    pub data: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// True when the tensor has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of the logical tensor.
    pub fn nbytes(&self) -> usize {
        self.len() * self.dtype.size_of()
    }
    /// True when the elements are contiguous in row-major order.
    pub fn is_contiguous(&self) -> bool {
        self.len() <= 1
            || self
                .shape
                .iter()
                .zip(self.strides.iter().zip(c_strides(&self.shape)))
                .all(|(&d, (&s, c))| d == 1 || s == c)
    }
}

/// A DLPack device for an arraybridge device (`torch:*` devices map to CPU / CUDA).
pub fn dl_device(device: Device) -> DLDevice {
    let (device_type, id) = match device {
        Device::Cpu | Device::TorchCpu => (DLDeviceType::CPU, 0),
        Device::Cuda(n) | Device::TorchCuda(n) => (DLDeviceType::CUDA, n),
        Device::OpenCl(n) => (DLDeviceType::OPENCL, n),
    };
    DLDevice {
        device_type,
        device_id: i32::try_from(id).unwrap_or(i32::MAX),
    }
}

/// The arraybridge device of a DLPack device: CPU and pinned CUDA host memory are `cpu`, CUDA
/// (and CUDA managed) memory `cuda:N`, OpenCL `opencl:N`; anything else is unsupported.
pub fn device_of(dl: DLDevice) -> Result<Device> {
    let id = usize::try_from(dl.device_id).map_err(|_| {
        BridgeError::InvalidInput(format!("DLPack device id {} is negative", dl.device_id).into())
    })?;
    match dl.device_type {
        DLDeviceType::CPU | DLDeviceType::CUDAHOST => Ok(Device::Cpu),
        DLDeviceType::CUDA | DLDeviceType::CUDAMANAGED => Ok(Device::Cuda(id)),
        DLDeviceType::OPENCL => Ok(Device::OpenCl(id)),
        other => Err(BridgeError::Unsupported(format!(
            "DLPack device type {} (id {}): arraybridge takes CPU, CUDA host, CUDA, CUDA managed \
             and OpenCL memory",
            other.0, dl.device_id
        ))),
    }
}

/// The DLPack data type of a [`DType`].
pub fn dl_dtype(dtype: DType) -> DLDataType {
    match dtype {
        DType::U8 => DLDataType::U8,
        DType::U16 => DLDataType::U16,
        DType::I32 => DLDataType::I32,
        DType::I64 => DLDataType::I64,
        DType::F16 => DLDataType::scalar(DLDataTypeCode::FLOAT, 16),
        DType::BF16 => DLDataType::scalar(DLDataTypeCode::BFLOAT, 16),
        DType::F32 => DLDataType::F32,
        DType::F64 => DLDataType::F64,
    }
}

/// The [`DType`] of a DLPack data type, or a typed error naming it.
pub fn dtype_of(dl: DLDataType) -> Result<DType> {
    let d = match (dl.code, dl.bits, dl.lanes) {
        (DLDataTypeCode::UINT, 8, 1) => DType::U8,
        (DLDataTypeCode::UINT, 16, 1) => DType::U16,
        (DLDataTypeCode::INT, 32, 1) => DType::I32,
        (DLDataTypeCode::INT, 64, 1) => DType::I64,
        (DLDataTypeCode::FLOAT, 16, 1) => DType::F16,
        (DLDataTypeCode::BFLOAT, 16, 1) => DType::BF16,
        (DLDataTypeCode::FLOAT, 32, 1) => DType::F32,
        (DLDataTypeCode::FLOAT, 64, 1) => DType::F64,
        _ => {
            let name = match dl.code {
                DLDataTypeCode::INT => "int",
                DLDataTypeCode::UINT => "uint",
                DLDataTypeCode::FLOAT => "float",
                DLDataTypeCode::BFLOAT => "bfloat",
                DLDataTypeCode::COMPLEX => "complex",
                DLDataTypeCode::BOOL => "bool",
                _ => "code",
            };
            return Err(BridgeError::InvalidInput(
                format!(
                    "DLPack dtype {name}{}{}: arraybridge takes uint8, uint16, int32, int64, \
                 float16, bfloat16, float32 and float64",
                    dl.bits,
                    if dl.lanes == 1 {
                        String::new()
                    } else {
                        format!("x{}", dl.lanes)
                    }
                )
                .into(),
            ));
        }
    };
    Ok(d)
}

fn dl_error(what: &str, e: impl fmt::Display) -> BridgeError {
    BridgeError::InvalidInput(format!("DLPack {what}: {e}").into())
}

enum Inner {
    Legacy(Managed<DLManagedTensor>),
    Versioned(Managed<DLManagedTensorVersioned>),
    /// Host memory described without a managed tensor, alive while the owner is
    /// ([`DlpackTensor::from_host_owner`]).
    Owned {
        _owner: Box<dyn Any + Send + Sync>,
    },
}

/// One DLPack managed tensor (either ABI), validated; its deleter runs exactly once, when this
/// is dropped (or its ownership is handed on with [`DlpackTensor::into_versioned`] /
/// [`DlpackTensor::into_legacy`]). Or host memory that another library's array owns, read in
/// place without a DLPack exchange ([`DlpackTensor::from_host_owner`]): the owner is dropped
/// with this, and such a tensor is neither ABI (it is re-exported as any other,
/// [`DlpackTensor::reexport`]).
pub struct DlpackTensor {
    inner: Inner,
    info: TensorInfo,
}

impl fmt::Debug for DlpackTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DlpackTensor")
            .field("info", &self.info)
            .finish()
    }
}

fn info_of<M: ManagedTensorBase>(m: &Managed<M>, abi: Abi) -> Result<TensorInfo> {
    let t = m.validate().map_err(|e| dl_error("tensor", e))?;
    let dtype = dtype_of(t.dtype())?;
    let device = device_of(t.device())?;
    let shape = t
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| dl_error("shape", format!("{d} < 0"))))
        .collect::<Result<Vec<_>>>()?;
    checked_len(&shape)?;
    let strides = t
        .strides_or_compact()
        .map_err(|e| dl_error("strides", e))?
        .iter()
        .map(|&s| isize::try_from(s).map_err(|_| dl_error("strides", "overflow")))
        .collect::<Result<Vec<_>>>()?;
    let offset =
        usize::try_from(t.byte_offset()).map_err(|_| dl_error("byte_offset", "overflow"))?;
    let data = (t.data_ptr() as usize)
        .checked_add(offset)
        .ok_or_else(|| dl_error("data pointer", "overflow"))?;
    if data == 0 && !shape.contains(&0) {
        return Err(dl_error("data pointer", "null for a non-empty tensor"));
    }
    let flags = m.flags();
    let dev = t.device();
    Ok(TensorInfo {
        shape,
        strides,
        dtype,
        device,
        dl_device: (dev.device_type.0, dev.device_id),
        read_only: flags.contains(DlpackFlags::READ_ONLY),
        is_copied: flags.contains(DlpackFlags::IS_COPIED),
        abi,
        data,
    })
}

impl DlpackTensor {
    /// Take a versioned managed tensor (validated; released again on error).
    pub fn from_versioned(m: Managed<DLManagedTensorVersioned>) -> Result<DlpackTensor> {
        let info = info_of(&m, Abi::Versioned)?;
        Ok(DlpackTensor {
            inner: Inner::Versioned(m),
            info,
        })
    }

    /// Take a legacy managed tensor (validated; released again on error).
    pub fn from_legacy(m: Managed<DLManagedTensor>) -> Result<DlpackTensor> {
        let info = info_of(&m, Abi::Legacy)?;
        Ok(DlpackTensor {
            inner: Inner::Legacy(m),
            info,
        })
    }

    /// Take ownership of a raw versioned managed tensor.
    ///
    /// # Safety
    /// `ptr` is a valid `DLManagedTensorVersioned` owned by the caller, per DLPack; its
    /// deleter (if any) may be called once, from any thread.
    pub unsafe fn from_raw_versioned(ptr: *mut DLManagedTensorVersioned) -> Result<DlpackTensor> {
        // SAFETY: forwarded from the caller.
        let m = unsafe { Managed::from_raw(ptr) }.map_err(|e| dl_error("tensor", e))?;
        DlpackTensor::from_versioned(m)
    }

    /// Take ownership of a raw legacy managed tensor.
    ///
    /// # Safety
    /// As [`DlpackTensor::from_raw_versioned`], for a `DLManagedTensor`.
    pub unsafe fn from_raw_legacy(ptr: *mut DLManagedTensor) -> Result<DlpackTensor> {
        // SAFETY: forwarded from the caller.
        let m = unsafe { Managed::from_raw(ptr) }.map_err(|e| dl_error("tensor", e))?;
        DlpackTensor::from_legacy(m)
    }

    /// A host tensor over memory that `owner` keeps alive, described by `info` (another
    /// library's array read in place without a DLPack exchange: the Python package reads a
    /// NumPy array's struct). The same checks as a DLPack import's: on the host, as many strides
    /// as axes, an element count that fits `usize`, a null data pointer only when empty.
    ///
    /// # Safety
    /// Every element that `info.shape` and `info.strides` address from `info.data` is memory
    /// of `info.dtype` that stays valid while `owner` lives (writable unless `info.read_only`),
    /// and `owner` may be dropped on any thread.
    pub unsafe fn from_host_owner(
        info: TensorInfo,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<DlpackTensor> {
        if info.device != Device::Cpu {
            return Err(dl_error(
                "device",
                format!("{} memory is read through DLPack only", info.device),
            ));
        }
        if info.shape.len() != info.strides.len() {
            return Err(dl_error(
                "strides",
                format!("{} for {} axes", info.strides.len(), info.shape.len()),
            ));
        }
        checked_len(&info.shape)?;
        if info.data == 0 && !info.shape.contains(&0) {
            return Err(dl_error("data pointer", "null for a non-empty tensor"));
        }
        Ok(DlpackTensor {
            inner: Inner::Owned { _owner: owner },
            info,
        })
    }

    /// What the descriptor says.
    pub fn info(&self) -> &TensorInfo {
        &self.info
    }

    /// The ABI.
    pub fn abi(&self) -> Abi {
        self.info.abi
    }

    /// Hand the managed tensor on (versioned ABI); `Err(self)` for a legacy one.
    pub fn into_versioned(
        self,
    ) -> std::result::Result<Managed<DLManagedTensorVersioned>, DlpackTensor> {
        match self.inner {
            Inner::Versioned(m) => Ok(m),
            inner => Err(DlpackTensor {
                inner,
                info: self.info,
            }),
        }
    }

    /// Hand the managed tensor on (legacy ABI); `Err(self)` for a versioned one.
    pub fn into_legacy(self) -> std::result::Result<Managed<DLManagedTensor>, DlpackTensor> {
        match self.inner {
            Inner::Legacy(m) => Ok(m),
            inner => Err(DlpackTensor {
                inner,
                info: self.info,
            }),
        }
    }

    fn host_check<T: HostElement>(&self, what: &str) -> Result<()> {
        if self.info.device != Device::Cpu {
            return Err(BridgeError::Unsupported(format!(
                "{what}: the DLPack tensor is on {}; only host tensors can be viewed",
                self.info.device
            )));
        }
        if self.info.dtype != T::DTYPE {
            return Err(BridgeError::DTypeMismatch {
                expected: T::DTYPE,
                found: self.info.dtype,
                context: what.into(),
            });
        }
        if !self.info.is_empty() && !self.info.data.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{what}: DLPack data at {:#x} is not aligned for {}",
                    self.info.data, self.info.dtype
                )
                .into(),
            ));
        }
        Ok(())
    }

    /// The lowest-address element and the shape with absolute strides (ndarray's raw views
    /// take non-negative strides only), plus the axes to invert afterwards.
    fn raw_layout(&self) -> (usize, ndarray::StrideShape<IxDyn>, Vec<usize>) {
        let size = self.info.dtype.size_of() as isize;
        let mut base = self.info.data as isize;
        let mut flip = Vec::new();
        let mut strides = Vec::with_capacity(self.info.strides.len());
        for (axis, (&d, &s)) in self.info.shape.iter().zip(&self.info.strides).enumerate() {
            if s < 0 && d > 1 {
                base += (d as isize - 1) * s * size;
                flip.push(axis);
            }
            strides.push(s.unsigned_abs());
        }
        (
            base as usize,
            IxDyn(&self.info.shape).strides(IxDyn(&strides)),
            flip,
        )
    }

    /// A zero-copy view of a host tensor (any strides, negative ones included).
    pub fn view<T: HostElement>(&self) -> Result<ArrayViewD<'_, T>> {
        self.host_check::<T>("DlpackTensor::view")?;
        if self.info.is_empty() {
            return ArrayViewD::from_shape(IxDyn(&self.info.shape), &[])
                .map_err(|e| dl_error("shape", e));
        }
        let (base, shape, flip) = self.raw_layout();
        // SAFETY: the producer guarantees (DLPack contract) that every element addressed by
        // shape and strides from `data` is readable memory of this dtype while the managed
        // tensor lives, which `self` (borrowed for the view's lifetime) keeps alive; `base` is
        // the lowest such element (alignment checked above) and the strides are absolute.
        let mut v = unsafe { ArrayViewD::from_shape_ptr(shape, base as *const T) };
        for axis in flip {
            v.invert_axis(ndarray::Axis(axis));
        }
        Ok(v)
    }

    /// A zero-copy mutable view of a host tensor; refused (typed) for a read-only one.
    pub fn view_mut<T: HostElement>(&mut self) -> Result<ArrayViewMutD<'_, T>> {
        if self.info.read_only {
            return Err(BridgeError::InvalidInput(
                "the DLPack tensor is read-only (its producer set READ_ONLY); cannot write to it"
                    .into(),
            ));
        }
        self.host_check::<T>("DlpackTensor::view_mut")?;
        if self.info.is_empty() {
            return ArrayViewMutD::from_shape(IxDyn(&self.info.shape), &mut [])
                .map_err(|e| dl_error("shape", e));
        }
        if has_overlap(&self.info.shape, &self.info.strides) {
            return Err(BridgeError::InvalidInput(
                "the DLPack tensor has overlapping elements (a zero or broadcast stride); cannot \
                 write to it"
                    .into(),
            ));
        }
        let (base, shape, flip) = self.raw_layout();
        // SAFETY: as in `view`; `&mut self` makes this the only view arraybridge hands out,
        // the tensor is writable (not READ_ONLY) and its elements do not overlap.
        let mut v = unsafe { ArrayViewMutD::from_shape_ptr(shape, base as *mut T) };
        for axis in flip {
            v.invert_axis(ndarray::Axis(axis));
        }
        Ok(v)
    }

    /// A host copy of the tensor as an owned, row-major [`HostData`].
    pub fn to_host_data(&self) -> Result<HostData> {
        Ok(crate::dispatch_dtype!(self.info.dtype, T => {
            let v = self.view::<T>()?;
            T::wrap(v.as_standard_layout().into_owned())
        }))
    }

    /// The owned [`Array`] of this tensor, and whether it was copied: a tensor that
    /// arraybridge exported comes back zero-copy (its owner is taken back); a foreign host
    /// tensor is copied into an ndarray. Device tensors need their backend: use
    /// `Registry::from_dlpack`.
    pub fn into_array(self) -> Result<(Array, bool)> {
        let this = match take_back(self) {
            Ok(a) => return Ok((a, false)),
            Err(t) => t,
        };
        if this.info.device != Device::Cpu {
            return Err(BridgeError::Unsupported(format!(
                "a DLPack tensor on {} needs its backend: use Registry::from_dlpack",
                this.info.device
            )));
        }
        Ok((Array::from_host(this.to_host_data()?), true))
    }

    /// The [`Array`] of a tensor arraybridge exported from an owned array, taken back without
    /// a copy (the tensor is released); `Err(self)` for any other tensor.
    pub fn take_back(self) -> std::result::Result<Array, DlpackTensor> {
        take_back(self)
    }

    /// Export this (imported) tensor again, zero-copy: a fresh managed tensor whose owner is
    /// `self` (shared), so the original producer's deleter runs only after every re-export's
    /// deleter has. A read-only tensor stays read-only.
    pub fn reexport(self: &Arc<Self>, opts: &ExportOptions) -> Result<DlpackTensor> {
        let info = &self.info;
        let raw = RawParts {
            data: info.data as *mut c_void,
            shape: info.shape.clone(),
            strides: info.strides.clone(),
            dtype: info.dtype,
            device: DLDevice {
                device_type: DLDeviceType(info.dl_device.0),
                device_id: info.dl_device.1,
            },
        };
        let opts = ExportOptions {
            read_only: opts.read_only || info.read_only,
            ..*opts
        };
        // SAFETY: the memory is the imported tensor's, valid while the managed tensor lives;
        // the owner keeps it alive until the new tensor's deleter runs.
        unsafe { export_raw(Box::new(Arc::clone(self)), raw, &opts, false) }
    }
}

fn has_overlap(shape: &[usize], strides: &[isize]) -> bool {
    let mut dims: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(d, _)| **d > 1)
        .map(|(&d, &s)| (s.unsigned_abs(), d))
        .collect();
    dims.sort_unstable();
    let mut span = 1usize; // elements covered by the smaller axes
    for (s, d) in dims {
        if s < span {
            return true;
        }
        span = s.saturating_mul(d);
    }
    false
}

/// What a device backend contributes to DLPack exchange (bridge-cuda implements it for CUDA
/// memory). Registered with `Registry::register_dlpack`.
pub trait DlpackExchange: Send + Sync {
    /// The memory type it imports into and exports from.
    fn memory_type(&self) -> MemoryType;
    /// Wrap a tensor on one of its devices as an [`Array`] of its memory type, zero-copy when
    /// the layout allows; returns how the data moved and how many bytes were copied.
    fn import(&self, tensor: DlpackTensor) -> Result<(Array, TransferKind, u64)>;
    /// Export an array of its memory type (honouring `opts.stream` as the DLPack protocol
    /// defines it).
    fn export(&self, array: Array, opts: &ExportOptions) -> Result<Exported>;
}

#[cfg(test)]
mod tests;
