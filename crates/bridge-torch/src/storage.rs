//! [`TorchStorage`]: a torch tensor as the storage of an [`Array`].
//!
//! # Ownership and aliasing contract
//!
//! - **Host → `torch:cpu` (zero-copy).** The tensor is made with `from_blob` over the ndarray's
//!   buffer, with the ndarray's own strides (any layout whose strides are all non-negative:
//!   C order, Fortran order, transposes, step slices). The ndarray moves into a shared owner;
//!   the tensor's *storage deleter* holds a reference to that owner, so the buffer lives as long
//!   as any tensor that views it — shallow clones, views and slices made by torch included. A
//!   tensor can never dangle. Arrays with a negative stride are copied once into C order
//!   (the conversion reports the bytes moved), then aliased the same way.
//! - **`torch:cpu` → Host.** If the tensor is a zero-copy alias and **no other tensor handle
//!   shares its storage** (nothing kept from [`TorchStorage::tensor`], no torch view), the
//!   original ndarray is handed back without a copy: every write made through the tensor
//!   (`fill_`, `copy_`, in-place ops) is visible in it. If other handles still share the buffer,
//!   or the tensor was allocated by torch, the data is copied into a new C-order ndarray, which
//!   shares nothing with the tensor afterwards.
//! - **While the data is a tensor**, the ndarray is not reachable from Rust (the owner gives out
//!   no reference), so writes through torch cannot race Rust references. [`tensor_view`]
//!   borrows a CPU tensor's memory as an ndarray view for as long as the `&Tensor` borrow: like
//!   every `&Tensor` API of tch, it assumes no *other* handle to the same storage writes during
//!   that borrow.
//! - **Layout.** The [`Array`] wrapping a [`TorchStorage`] has the tensor's shape and, as every
//!   non-host array made with [`Array::from_storage`], C-order strides; the tensor itself may be
//!   strided (a zero-copy alias of a transposed ndarray, a transposed torch tensor). The tensor's
//!   own `stride()` is the truth, and every conversion out of torch honours it.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use bridge_core::{Array, BridgeError, DType, Device, HostElement, MemoryType, Result, Storage};
use ndarray::ArrayViewD;
use tch::Tensor;

use crate::dtype::dtype_of;
use crate::ffi::{self, HostOwner, Place};

/// A torch tensor holding an [`Array`]'s data (on `torch:cpu` or `torch:cuda:N`).
///
/// `Send + Sync`: the tensor sits behind a mutex (tch tensors are `Send` only). See the module
/// docs for when memory is shared with an ndarray.
pub struct TorchStorage {
    tensor: Mutex<Tensor>,
    dtype: DType,
    device: Device,
    shape: Vec<usize>,
    owner: Option<Arc<HostOwner>>,
}

impl fmt::Debug for TorchStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TorchStorage")
            .field("dtype", &self.dtype)
            .field("device", &self.device)
            .field("shape", &self.shape)
            .field("aliases_ndarray", &self.owner.is_some())
            .finish()
    }
}

/// The arraybridge device of a tch device (`torch:cpu`, `torch:cuda:N`); other devices (MPS,
/// Vulkan) are unsupported.
pub fn device_of(tensor: &Tensor) -> Result<Device> {
    match tensor.device() {
        tch::Device::Cpu => Ok(Device::TorchCpu),
        tch::Device::Cuda(n) => Ok(Device::TorchCuda(n)),
        other => Err(BridgeError::Unsupported(format!(
            "torch device {other:?} is not supported (torch:cpu and torch:cuda:N are)"
        ))),
    }
}

fn shape_of(tensor: &Tensor) -> Vec<usize> {
    tensor
        .size()
        .iter()
        .map(|&d| usize::try_from(d).unwrap_or(0))
        .collect()
}

impl TorchStorage {
    /// Wrap any tensor (no copy). Errors for undefined tensors, dtypes with no [`DType`] and
    /// devices other than CPU and CUDA.
    pub fn from_tensor(tensor: Tensor) -> Result<TorchStorage> {
        let dtype = dtype_of(&tensor)?;
        let device = device_of(&tensor)?;
        Ok(TorchStorage {
            shape: shape_of(&tensor),
            tensor: Mutex::new(tensor),
            dtype,
            device,
            owner: None,
        })
    }

    pub(crate) fn aliasing(tensor: Tensor, dtype: DType, owner: Arc<HostOwner>) -> TorchStorage {
        TorchStorage {
            shape: shape_of(&tensor),
            tensor: Mutex::new(tensor),
            dtype,
            device: Device::TorchCpu,
            owner: Some(owner),
        }
    }

    /// A new handle to the tensor (a shallow clone: same memory). Safe to keep beyond this
    /// storage: the memory stays alive as long as any handle does. Keeping one makes the next
    /// `torch:cpu → host` conversion copy instead of handing the ndarray back.
    pub fn tensor(&self) -> Tensor {
        self.lock().shallow_clone()
    }

    /// Run `f` with the tensor borrowed (no new handle).
    pub fn with_tensor<R>(&self, f: impl FnOnce(&Tensor) -> R) -> R {
        f(&self.lock())
    }

    /// The tensor, mutably (for in-place ops). Do not resize it: the array's shape is fixed.
    pub fn tensor_mut(&mut self) -> &mut Tensor {
        self.tensor
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Take the tensor out (the memory stays alive with it).
    pub fn into_tensor(self) -> Tensor {
        self.tensor
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// True when the tensor aliases an ndarray's buffer (made by a zero-copy host conversion).
    pub fn aliases_ndarray(&self) -> bool {
        self.owner.is_some()
    }

    /// Wrap into an [`Array`] (shape and dtype from the tensor).
    pub fn into_array(self) -> Result<Array> {
        let shape = self.shape.clone();
        let dtype = self.dtype;
        Array::from_storage(Box::new(self), shape, dtype)
    }

    pub(crate) fn nbytes_u64(&self) -> u64 {
        (self.shape.iter().product::<usize>() * self.dtype.size_of()) as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tensor> {
        self.tensor.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn into_parts(self) -> (Tensor, DType, Device, Option<Arc<HostOwner>>) {
        let TorchStorage {
            tensor,
            dtype,
            device,
            owner,
            ..
        } = self;
        (
            tensor.into_inner().unwrap_or_else(PoisonError::into_inner),
            dtype,
            device,
            owner,
        )
    }
}

impl Storage for TorchStorage {
    fn memory_type(&self) -> MemoryType {
        MemoryType::Torch
    }
    fn device(&self) -> Device {
        self.device
    }
    fn nbytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size_of()
    }
}

/// Wrap a tensor as an [`Array`] of memory type `torch` (no copy).
pub fn array_from_tensor(tensor: Tensor) -> Result<Array> {
    TorchStorage::from_tensor(tensor)?.into_array()
}

/// A handle to the tensor inside a torch [`Array`] (shallow clone, same memory).
pub fn tensor_of(array: &Array) -> Result<Tensor> {
    array
        .storage::<TorchStorage>()
        .map(TorchStorage::tensor)
        .ok_or_else(|| not_torch(array))
}

/// Take the tensor out of a torch [`Array`].
pub fn into_tensor(array: Array) -> Result<Tensor> {
    let err = not_torch(&array);
    array
        .into_storage::<TorchStorage>()
        .map(|(s, _, _)| s.into_tensor())
        .map_err(|_| err)
}

pub(crate) fn not_torch(array: &Array) -> BridgeError {
    BridgeError::Unsupported(format!(
        "expected a torch array, found {} memory on {}",
        array.memory_type(),
        array.device()
    ))
}

/// Borrow a CPU tensor as an ndarray view of element type `T`, without copying. The view
/// borrows the tensor, so it cannot outlive it (nor the memory: the tensor keeps it alive).
/// Errors on dtype mismatch ([`BridgeError::DTypeMismatch`]), CUDA tensors and undefined
/// tensors. Torch strides and storage offsets are honoured.
pub fn tensor_view<'a, T: HostElement>(tensor: &'a Tensor) -> Result<ArrayViewD<'a, T>> {
    if !tensor.defined() {
        return Err(BridgeError::invalid_argument(
            "tensor",
            "undefined tensor has no data",
        ));
    }
    let dtype = dtype_of(tensor)?;
    if dtype != T::DTYPE {
        return Err(BridgeError::DTypeMismatch {
            expected: T::DTYPE,
            found: dtype,
            context: "bridge_torch::tensor_view".into(),
        });
    }
    if ffi::device_place(tensor) != Place::Cpu {
        return Err(BridgeError::Unsupported(format!(
            "tensor_view needs a CPU tensor, this one is on {:?}; convert it to torch:cpu first",
            tensor.device()
        )));
    }
    ffi::view::<T>(tensor)
}
