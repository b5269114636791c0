//! The NumPy fast path of imports (issue 33): an array that is exactly a `numpy.ndarray` is
//! read in place from its C struct (data pointer, shape, byte strides, dtype, flags) instead
//! of through a DLPack exchange (`__dlpack_device__`, `__dlpack__(max_version=…)`, a capsule
//! and a managed tensor), which cost about 1.7 µs of `arraybridge.convert`'s 2.2 µs
//! (docs/perf.md).
//!
//! The result is exactly what NumPy's versioned DLPack export would have given
//! (`numpy/_core/src/multiarray/dlpack.c`): the same data pointer (no byte offset), the shape,
//! the byte strides divided by the item size (truncated, as NumPy does), the dtype, `READ_ONLY`
//! when the array is not writeable, the CPU device, and the array kept alive by the tensor.
//! Whatever NumPy would refuse or describe otherwise is left to the DLPack path, so its errors
//! and results stay NumPy's and dlpark's: an ndarray subclass (it may override `__dlpack__`), a
//! dtype outside arraybridge's (bool, complex, object, `uint32`, … give the same
//! `InvalidInput` as before), a non-native byte order (NumPy's `BufferError`), strides that
//! are not a multiple of the item size, and an array whose base is a DLPack capsule (NumPy
//! reports the producer's device for those: CUDA host memory, for one).

use std::ffi::{c_int, c_long, c_longlong};

use bridge_core::dlpack::{Abi, DlpackTensor, TensorInfo};
use bridge_core::{DType, Device};
use numpy::npyffi::{NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE, NPY_TYPES, PyArrayObject};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// `numpy.ndarray`, looked up once (`None` while NumPy cannot be imported).
fn ndarray_type(py: Python<'_>) -> Option<*mut ffi::PyTypeObject> {
    static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    NDARRAY
        .get_or_try_init(py, || -> PyResult<Py<PyType>> {
            Ok(py
                .import("numpy")?
                .getattr("ndarray")?
                .cast_into::<PyType>()?
                .unbind())
        })
        .ok()
        .map(|t| t.as_ptr().cast::<ffi::PyTypeObject>())
}

/// A signed integer of `bytes` bytes.
fn int_of(bytes: usize) -> Option<DType> {
    match bytes {
        4 => Some(DType::I32),
        8 => Some(DType::I64),
        _ => None,
    }
}

/// arraybridge's dtype of a NumPy type number, with its item size; `None` outside the eight
/// (and bfloat16, which NumPy has no built-in type for).
fn dtype_of(type_num: c_int) -> Option<DType> {
    use std::mem::size_of;
    let t = |n: NPY_TYPES| n as c_int;
    match type_num {
        n if n == t(NPY_TYPES::NPY_UBYTE) => Some(DType::U8),
        n if n == t(NPY_TYPES::NPY_USHORT) => Some(DType::U16),
        n if n == t(NPY_TYPES::NPY_INT) => int_of(size_of::<c_int>()),
        n if n == t(NPY_TYPES::NPY_LONG) => int_of(size_of::<c_long>()),
        n if n == t(NPY_TYPES::NPY_LONGLONG) => int_of(size_of::<c_longlong>()),
        n if n == t(NPY_TYPES::NPY_HALF) => Some(DType::F16),
        n if n == t(NPY_TYPES::NPY_FLOAT) => Some(DType::F32),
        n if n == t(NPY_TYPES::NPY_DOUBLE) => Some(DType::F64),
        _ => None,
    }
}

/// The byte-order character of the other endianness (`PyDataType_ISBYTESWAPPED`).
const SWAPPED: u8 = if cfg!(target_endian = "little") {
    b'>'
} else {
    b'<'
};

/// What keeps a NumPy array alive inside a tensor read in place. Its release takes the GIL
/// itself (`release`), as NumPy's own DLPack deleter does, so the array is freed at once from
/// any drop: a DLPack consumer's deleter included, which runs on any thread, and also on the
/// thread of an arraybridge call inside a consumer that released the GIL.
struct Keep(Option<Py<PyAny>>);

impl Drop for Keep {
    fn drop(&mut self) {
        if let Some(obj) = self.0.take() {
            release(obj);
        }
    }
}

/// Drops the reference `obj` from any thread, whether or not it holds the GIL.
///
/// `Python::attach` is not enough here: it trusts PyO3's count of the thread's attachments,
/// which stays positive inside an arraybridge call while a consumer it called has released
/// the GIL in C++ (XLA frees an older imported buffer there: `ab.convert(x, to="jax")` on the
/// GPU machine's JAX 0.11 freed a NumPy array without the GIL, and the process crashed in
/// `array_dealloc`). `PyGILState_Ensure` asks the interpreter whether this thread holds the
/// GIL and takes it when not. With no interpreter left the reference is leaked, as PyO3
/// does.
fn release(obj: Py<PyAny>) {
    // SAFETY: `Py_IsInitialized` may be called at any time, from any thread.
    if unsafe { ffi::Py_IsInitialized() } == 0 {
        std::mem::forget(obj);
        return;
    }
    let ptr = obj.into_ptr();
    // SAFETY: the interpreter is initialized; `PyGILState_Ensure` gives this thread the GIL
    // whether or not it held it, and `PyGILState_Release` restores that state; `ptr` is a
    // strong reference this function owns (`into_ptr` gave it up without a decrement), so
    // decrementing it once under the GIL is exactly `obj`'s drop.
    unsafe {
        let state = ffi::PyGILState_Ensure();
        ffi::Py_DecRef(ptr);
        ffi::PyGILState_Release(state);
    }
}

/// `obj` as a host tensor read in place when it is exactly a `numpy.ndarray` that NumPy would
/// export through DLPack as described in the module docs; `None` otherwise (the caller takes
/// the DLPack path). Never raises.
pub(crate) fn try_import(obj: &Bound<'_, PyAny>) -> Option<DlpackTensor> {
    let py = obj.py();
    let ndarray = ndarray_type(py)?;
    let ptr = obj.as_ptr();
    // SAFETY: `ptr` is a live object (borrowed by `obj`) and we hold the GIL.
    if unsafe { ffi::Py_TYPE(ptr) } != ndarray {
        return None;
    }
    // SAFETY: the object is exactly a `numpy.ndarray`, so its memory is a `PyArrayObject`
    // (whose layout NumPy keeps across 1.x and 2.x); we hold the GIL, so it cannot change
    // while we read it, and we copy what we need before releasing the borrow.
    let arr = unsafe { &(*ptr.cast::<PyArrayObject>()).fields };
    // SAFETY: a live ndarray's descriptor is a live `PyArray_Descr`, whose leading fields
    // (`typeobj`, `kind`, `type`, `byteorder`, `type_num`) are laid out alike in NumPy 1.x
    // and 2.x.
    let descr = unsafe { &(*arr.descr).fields };
    let dtype = dtype_of(descr.type_num)?;
    if descr.byteorder as u8 == SWAPPED {
        return None;
    }
    let nd = usize::try_from(arr.nd).ok()?;
    let (dims, byte_strides): (&[isize], &[isize]) = if nd == 0 {
        (&[], &[])
    } else {
        // SAFETY: an ndarray of `nd > 0` dimensions has `nd` dimensions and `nd` strides.
        unsafe {
            (
                std::slice::from_raw_parts(arr.dimensions, nd),
                std::slice::from_raw_parts(arr.strides, nd),
            )
        }
    };
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    let len = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    let itemsize = dtype.size_of() as isize;
    // NumPy refuses strides that are not a multiple of the item size (except on axes of one
    // element, and for C-contiguous or one-element arrays): its error, through DLPack
    if arr.flags & NPY_ARRAY_C_CONTIGUOUS == 0
        && len != 1
        && shape
            .iter()
            .zip(byte_strides)
            .any(|(&d, &s)| d != 1 && s % itemsize != 0)
    {
        return None;
    }
    // NumPy reports the device of a DLPack producer for an array that views its capsule
    let mut base = arr.base;
    // SAFETY: `base` is null or a live object that the array (or a base of it) owns; an
    // ndarray's memory (a subclass's included) starts with a `PyArrayObject`.
    unsafe {
        while !base.is_null() && ffi::PyObject_TypeCheck(base, ndarray) != 0 {
            base = (*base.cast::<PyArrayObject>()).fields.base;
        }
        if !base.is_null() && ffi::PyCapsule_CheckExact(base) != 0 {
            return None;
        }
    }
    let data = arr.data as usize;
    if data == 0 && len != 0 {
        return None;
    }
    let info = TensorInfo {
        strides: byte_strides.iter().map(|&s| s / itemsize).collect(),
        shape,
        dtype,
        device: Device::Cpu,
        dl_device: (1, 0),
        read_only: arr.flags & NPY_ARRAY_WRITEABLE == 0,
        is_copied: false,
        abi: Abi::Versioned,
        data,
    };
    let owner = Box::new(Keep(Some(obj.clone().unbind())));
    // SAFETY: the elements addressed by the array's shape and strides from its data pointer
    // are its memory, which stays valid while the array lives (NumPy's own guarantee to its
    // DLPack consumers, who hold the array as we do); writable exactly when the array is
    // writeable; the owner may be dropped on any thread (`Keep`).
    unsafe { DlpackTensor::from_host_owner(info, owner) }.ok()
}
