//! The type-erased array handle that every backend can hold.
//!
//! An [`Array`] is a shape, element strides, a [`DType`] and an owned [`Storage`]. The storage
//! says which [`MemoryType`] and [`Device`] hold the bytes; backends define their own storage
//! types (a CUDA buffer, an OpenCL buffer, a Torch tensor) and downcast to them with
//! [`Array::storage`]. Host arrays are stored as [`HostData`], an `ndarray::ArrayD` of the right
//! element type, so host views keep their (possibly non-contiguous) layout.
//!
//! ```
//! use bridge_core::{Array, DType, Device};
//! use ndarray::ArrayD;
//! let a = Array::from_ndarray(ArrayD::<f32>::zeros(vec![2, 3]));
//! assert_eq!(a.shape(), &[2, 3]);
//! assert_eq!(a.dtype(), DType::F32);
//! assert_eq!(a.device(), Device::Cpu);
//! assert_eq!(a.nbytes(), 24);
//! let back = a.into_ndarray::<f32>()?;
//! assert_eq!(back.shape(), &[2, 3]);
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```

use std::any::Any;
use std::borrow::Cow;
use std::fmt;

use half::{bf16, f16};
use ndarray::{ArrayD, ArrayViewD, IxDyn};

use crate::device::{Device, MemoryType};
use crate::dtype::{CastMode, DType, Element, cast_iter};
use crate::error::{BridgeError, Result};

/// Run `$body` with `$T` bound to the Rust element type of a [`DType`] value.
///
/// ```
/// use bridge_core::{dispatch_dtype, DType, Element};
/// fn size(d: DType) -> usize { dispatch_dtype!(d, T => std::mem::size_of::<T>()) }
/// assert_eq!(size(DType::BF16), 2);
/// ```
#[macro_export]
macro_rules! dispatch_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::bf16;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}

/// Owned memory of some backend. Implemented by every backend's buffer type.
///
/// `Any` is a supertrait, so a `&dyn Storage` upcasts to `&dyn Any` (and a `Box<dyn Storage>`
/// to a `Box<dyn Any>`) for downcasting to the backend's type; [`Array::storage`],
/// [`Array::storage_mut`] and [`Array::into_storage`] do that.
pub trait Storage: Any + Send + Sync + fmt::Debug {
    /// Which framework owns the memory.
    fn memory_type(&self) -> MemoryType;
    /// Where the memory lives.
    fn device(&self) -> Device;
    /// Size of the allocation in bytes.
    fn nbytes(&self) -> usize;
}

/// A host ndarray of one of the eight element types.
#[derive(Clone, PartialEq)]
#[allow(missing_docs)]
pub enum HostData {
    U8(ArrayD<u8>),
    U16(ArrayD<u16>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    F16(ArrayD<f16>),
    BF16(ArrayD<bf16>),
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
}

/// Run `$body` with `$a` bound to the typed `ArrayD` inside a [`HostData`] (by value or reference,
/// as the matched expression is).
#[macro_export]
macro_rules! with_host_data {
    ($data:expr, $a:ident => $body:expr) => {
        match $data {
            $crate::array::HostData::U8($a) => $body,
            $crate::array::HostData::U16($a) => $body,
            $crate::array::HostData::I32($a) => $body,
            $crate::array::HostData::I64($a) => $body,
            $crate::array::HostData::F16($a) => $body,
            $crate::array::HostData::BF16($a) => $body,
            $crate::array::HostData::F32($a) => $body,
            $crate::array::HostData::F64($a) => $body,
        }
    };
}

impl fmt::Debug for HostData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostData<{}>{:?}", self.dtype(), self.shape())
    }
}

/// Conversion between a typed `ArrayD<T>` and [`HostData`]; implemented for every [`Element`].
pub trait HostElement: Element {
    /// Wrap a typed array.
    fn wrap(a: ArrayD<Self>) -> HostData;
    /// Borrow the typed array if the dtype matches.
    fn peek(d: &HostData) -> Option<&ArrayD<Self>>;
    /// Borrow mutably if the dtype matches.
    fn peek_mut(d: &mut HostData) -> Option<&mut ArrayD<Self>>;
    /// Unwrap if the dtype matches; give the data back otherwise.
    fn take(d: HostData) -> std::result::Result<ArrayD<Self>, HostData>;
}

macro_rules! host_element {
    ($t:ty, $v:ident) => {
        impl HostElement for $t {
            fn wrap(a: ArrayD<Self>) -> HostData {
                HostData::$v(a)
            }
            fn peek(d: &HostData) -> Option<&ArrayD<Self>> {
                match d {
                    HostData::$v(a) => Some(a),
                    _ => None,
                }
            }
            fn peek_mut(d: &mut HostData) -> Option<&mut ArrayD<Self>> {
                match d {
                    HostData::$v(a) => Some(a),
                    _ => None,
                }
            }
            fn take(d: HostData) -> std::result::Result<ArrayD<Self>, HostData> {
                match d {
                    HostData::$v(a) => Ok(a),
                    other => Err(other),
                }
            }
        }
    };
}
host_element!(u8, U8);
host_element!(u16, U16);
host_element!(i32, I32);
host_element!(i64, I64);
host_element!(f16, F16);
host_element!(bf16, BF16);
host_element!(f32, F32);
host_element!(f64, F64);

impl HostData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            HostData::U8(_) => DType::U8,
            HostData::U16(_) => DType::U16,
            HostData::I32(_) => DType::I32,
            HostData::I64(_) => DType::I64,
            HostData::F16(_) => DType::F16,
            HostData::BF16(_) => DType::BF16,
            HostData::F32(_) => DType::F32,
            HostData::F64(_) => DType::F64,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        with_host_data!(self, a => a.shape())
    }

    /// Element strides (may be negative or zero for views).
    pub fn strides(&self) -> &[isize] {
        with_host_data!(self, a => a.strides())
    }

    /// True when the elements are contiguous in row-major (C) order.
    pub fn is_standard_layout(&self) -> bool {
        with_host_data!(self, a => a.is_standard_layout())
    }

    /// The elements as bytes in row-major logical order: borrowed when already contiguous,
    /// copied otherwise.
    pub fn to_c_bytes(&self) -> Cow<'_, [u8]> {
        let item = self.dtype().size_of();
        with_host_data!(self, a => match a.as_slice() {
            Some(s) => Cow::Borrowed(bytemuck::cast_slice(s)),
            // one pass: gathered straight into the byte vector
            None => {
                let mut out = Vec::with_capacity(a.len() * item);
                for v in a.iter() {
                    out.extend_from_slice(bytemuck::bytes_of(v));
                }
                Cow::Owned(out)
            }
        })
    }

    /// Build a C-ordered array of `dtype` and `shape` from raw bytes (copied, so any alignment
    /// is fine). Errors when the byte length does not match.
    pub fn from_c_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<HostData> {
        let n = checked_len(shape)?;
        let expected = n
            .checked_mul(dtype.size_of())
            .ok_or_else(|| BridgeError::invalid_argument("shape", "byte size overflows usize"))?;
        if bytes.len() != expected {
            return Err(BridgeError::shape_mismatch(
                format!("{expected} bytes for {dtype} {shape:?}"),
                format!("{} bytes", bytes.len()),
                "HostData::from_c_bytes",
            ));
        }
        Ok(dispatch_dtype!(dtype, T => {
            let mut v = vec![T::default(); n];
            bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
            T::wrap(vec_to_array(shape, v)?)
        }))
    }

    /// Cast to another dtype under `mode` (see [`crate::dtype`] for the policy). The result is
    /// in standard layout with the same shape.
    pub fn cast(&self, to: DType, mode: CastMode) -> Result<HostData> {
        if to == self.dtype() {
            return Ok(self.clone());
        }
        let shape = self.shape().to_vec();
        with_host_data!(self, a => {
            dispatch_dtype!(to, D => {
                let v: Vec<D> = cast_iter(a.iter().copied(), a.len(), mode)?;
                Ok(D::wrap(vec_to_array(&shape, v)?))
            })
        })
    }
}

/// Number of elements of a shape, with overflow checked.
pub fn checked_len(shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d).ok_or_else(|| {
            BridgeError::invalid_argument("shape", format!("{shape:?} overflows usize"))
        })
    })
}

/// C-order element strides for `shape`.
pub fn c_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(d.max(1) as isize);
    }
    strides
}

fn vec_to_array<T>(shape: &[usize], v: Vec<T>) -> Result<ArrayD<T>> {
    let len = v.len();
    ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| {
        BridgeError::shape_mismatch(format!("{shape:?}"), format!("{len} elements ({e})"), "")
    })
}

/// Host storage: an ndarray.
#[derive(Debug, Clone, PartialEq)]
pub struct HostStorage(pub HostData);

impl Storage for HostStorage {
    fn memory_type(&self) -> MemoryType {
        MemoryType::Host
    }
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn nbytes(&self) -> usize {
        self.0.shape().iter().product::<usize>() * self.0.dtype().size_of()
    }
}

/// A type-erased n-dimensional array on any device.
pub struct Array {
    shape: Vec<usize>,
    strides: Vec<isize>,
    dtype: DType,
    storage: Box<dyn Storage>,
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array")
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("dtype", &self.dtype)
            .field("device", &self.device())
            .field("memory_type", &self.memory_type())
            .finish()
    }
}

impl Array {
    /// Wrap a host ndarray (any layout) without copying.
    pub fn from_ndarray<T: HostElement>(a: ArrayD<T>) -> Array {
        Array::from_host(T::wrap(a))
    }

    /// Wrap host data without copying.
    pub fn from_host(data: HostData) -> Array {
        Array {
            shape: data.shape().to_vec(),
            strides: data.strides().to_vec(),
            dtype: data.dtype(),
            storage: Box::new(HostStorage(data)),
        }
    }

    /// Wrap a backend's storage holding a C-contiguous array of `dtype` and `shape`.
    ///
    /// Errors when the storage is smaller than the array needs, and for host storage
    /// ([`HostStorage`]) whose data has another shape or dtype.
    pub fn from_storage(
        storage: Box<dyn Storage>,
        shape: Vec<usize>,
        dtype: DType,
    ) -> Result<Array> {
        let n = checked_len(&shape)?;
        let need = n
            .checked_mul(dtype.size_of())
            .ok_or_else(|| BridgeError::invalid_argument("shape", "byte size overflows usize"))?;
        if storage.nbytes() < need {
            return Err(BridgeError::shape_mismatch(
                format!("at least {need} bytes for {dtype} {shape:?}"),
                format!(
                    "{} bytes of {} storage",
                    storage.nbytes(),
                    storage.memory_type()
                ),
                "Array::from_storage",
            ));
        }
        // host data carries its own shape and dtype: they must be the array's (the host
        // accessors read the data, not the array's shape)
        let any: &dyn Any = storage.as_ref();
        if let Some(HostStorage(data)) = any.downcast_ref::<HostStorage>()
            && (data.shape() != shape.as_slice()
                || data.dtype() != dtype
                || (n > 1 && data.strides() != c_strides(&shape).as_slice()))
        {
            return Err(BridgeError::shape_mismatch(
                format!("C-contiguous {dtype} {shape:?}"),
                format!(
                    "host data {} {:?} (strides {:?})",
                    data.dtype(),
                    data.shape(),
                    data.strides()
                ),
                "Array::from_storage (use Array::from_host for host data)",
            ));
        }
        Ok(Array {
            strides: c_strides(&shape),
            shape,
            dtype,
            storage,
        })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Element strides of the logical view.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of the logical array (`len × size_of(dtype)`).
    pub fn nbytes(&self) -> usize {
        self.len() * self.dtype.size_of()
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.storage.device()
    }
    /// Which framework owns the data.
    pub fn memory_type(&self) -> MemoryType {
        self.storage.memory_type()
    }
    /// True when the elements are contiguous in row-major order.
    pub fn is_contiguous(&self) -> bool {
        self.strides == c_strides(&self.shape) || self.len() <= 1
    }
    /// The storage, type-erased.
    pub fn storage_dyn(&self) -> &dyn Storage {
        self.storage.as_ref()
    }
    /// The storage downcast to a backend's type.
    pub fn storage<S: Storage>(&self) -> Option<&S> {
        let any: &dyn Any = self.storage.as_ref();
        any.downcast_ref::<S>()
    }
    /// Mutable storage downcast.
    pub fn storage_mut<S: Storage>(&mut self) -> Option<&mut S> {
        let any: &mut dyn Any = self.storage.as_mut();
        any.downcast_mut::<S>()
    }
    /// Take the storage out as a backend's type; gives the array back on a type mismatch.
    pub fn into_storage<S: Storage>(
        self,
    ) -> std::result::Result<(Box<S>, Vec<usize>, DType), Array> {
        if self.storage::<S>().is_none() {
            return Err(self);
        }
        let Array {
            shape,
            dtype,
            storage,
            ..
        } = self;
        let any: Box<dyn Any> = storage;
        match any.downcast::<S>() {
            Ok(s) => Ok((s, shape, dtype)),
            Err(_) => unreachable!("the storage type was checked with `is` above"),
        }
    }

    /// The host data, or an error naming where the array lives.
    pub fn host(&self) -> Result<&HostData> {
        self.storage::<HostStorage>()
            .map(|h| &h.0)
            .ok_or_else(|| self.not_host("Array::host"))
    }

    /// Take the host data out, or an error naming where the array lives.
    pub fn into_host(self) -> Result<HostData> {
        let err = self.not_host("Array::into_host");
        match self.into_storage::<HostStorage>() {
            Ok((s, _, _)) => Ok(s.0),
            Err(_) => Err(err),
        }
    }

    fn not_host(&self, what: &str) -> BridgeError {
        BridgeError::Unsupported(format!(
            "{what}: the array is {} memory on {}; convert it to host memory first",
            self.memory_type(),
            self.device()
        ))
    }

    fn dtype_check<T: Element>(&self, context: &str) -> Result<()> {
        if self.dtype != T::DTYPE {
            return Err(BridgeError::DTypeMismatch {
                expected: T::DTYPE,
                found: self.dtype,
                context: context.into(),
            });
        }
        Ok(())
    }

    /// Borrow a host array as a typed view.
    pub fn as_ndarray<T: HostElement>(&self) -> Result<ArrayViewD<'_, T>> {
        self.dtype_check::<T>("Array::as_ndarray")?;
        let h = self.host()?;
        T::peek(h).map(|a| a.view()).ok_or_else(|| {
            BridgeError::Unsupported("host data dtype disagrees with its tag".into())
        })
    }

    /// Take a host array out as a typed ndarray.
    pub fn into_ndarray<T: HostElement>(self) -> Result<ArrayD<T>> {
        self.dtype_check::<T>("Array::into_ndarray")?;
        let h = self.into_host()?;
        T::take(h)
            .map_err(|_| BridgeError::Unsupported("host data dtype disagrees with its tag".into()))
    }

    /// Cast a host array to another dtype (see [`crate::dtype`] for the policy).
    pub fn cast(&self, to: DType, mode: CastMode) -> Result<Array> {
        Ok(Array::from_host(self.host()?.cast(to, mode)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array2, s};

    #[test]
    fn host_storage_must_be_the_arrays_shape_and_dtype() {
        let data = || HostData::F64(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[100]), 1.0));
        // 100 values are more bytes than 2×3 needs, but they are not a 2×3 array
        let e = Array::from_storage(Box::new(HostStorage(data())), vec![2, 3], DType::F64);
        assert!(matches!(e, Err(BridgeError::ShapeMismatch { .. })), "{e:?}");
        let e = Array::from_storage(Box::new(HostStorage(data())), vec![100], DType::U8);
        assert!(e.is_err());
        let t = HostData::F64(Array2::<f64>::zeros((3, 4)).reversed_axes().into_dyn());
        assert!(Array::from_storage(Box::new(HostStorage(t)), vec![4, 3], DType::F64).is_err());
        let a = Array::from_storage(Box::new(HostStorage(data())), vec![100], DType::F64).unwrap();
        assert_eq!(a.shape(), [100]);
    }

    #[test]
    fn non_contiguous_bytes_are_logical_order() {
        let a = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as u16);
        let logical: Vec<u16> = a.t().iter().copied().collect();
        let h = HostData::U16(a.clone().reversed_axes().into_dyn()); // non-contiguous
        assert!(!h.is_standard_layout());
        assert_eq!(
            h.to_c_bytes().as_ref(),
            bytemuck::cast_slice::<u16, u8>(&logical)
        );
        let strided = a.slice(s![.., ..;2]).to_owned().into_dyn();
        let arr = Array::from_ndarray(strided);
        assert!(arr.is_contiguous());
        let nc = Array::from_ndarray(a.clone().reversed_axes().into_dyn());
        assert!(!nc.is_contiguous());
        assert_eq!(nc.host().map(|h| h.to_c_bytes().len()).unwrap_or(0), 24);
    }

    #[test]
    fn from_bytes_checks_length() {
        assert!(HostData::from_c_bytes(DType::F32, &[2, 2], &[0u8; 15]).is_err());
        let h = HostData::from_c_bytes(DType::F32, &[2, 2], &[0u8; 16]);
        assert!(matches!(h, Ok(HostData::F32(_))));
    }

    #[test]
    fn storage_downcasts_through_any_upcasting() {
        #[derive(Debug)]
        struct Other;
        impl Storage for Other {
            fn memory_type(&self) -> MemoryType {
                MemoryType::Cuda
            }
            fn device(&self) -> Device {
                Device::Cuda(0)
            }
            fn nbytes(&self) -> usize {
                8
            }
        }
        let mut a = Array::from_ndarray(ArrayD::<f32>::zeros(IxDyn(&[2])));
        assert!(a.storage::<HostStorage>().is_some());
        assert!(a.storage_mut::<HostStorage>().is_some());
        assert!(a.storage::<Other>().is_none());
        let a = match a.into_storage::<Other>() {
            Ok(_) => panic!("downcast to the wrong type"),
            Err(a) => a,
        };
        let (s, shape, dtype) = a
            .into_storage::<HostStorage>()
            .unwrap_or_else(|_| panic!("downcast to the right type"));
        assert_eq!(
            (s.0.shape(), shape.as_slice(), dtype),
            (&[2][..], &[2][..], DType::F32)
        );
        let other = Array::from_storage(Box::new(Other), vec![2], DType::F32);
        let other = other.unwrap_or_else(|e| panic!("{e}"));
        assert!(other.storage::<Other>().is_some());
        assert!(other.storage::<HostStorage>().is_none());
    }

    #[test]
    fn dtype_mismatch_is_typed() {
        let a = Array::from_ndarray(ArrayD::<f32>::zeros(IxDyn(&[2])));
        assert!(matches!(
            a.as_ndarray::<f64>(),
            Err(BridgeError::DTypeMismatch { .. })
        ));
    }
}
