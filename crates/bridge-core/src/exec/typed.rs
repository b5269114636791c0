//! Typed device buffers and typed kernel launches over any [`Executor`].
//!
//! The [`Executor`] trait moves bytes; algorithms work with [`Buffer<E, T>`]: a device buffer
//! that knows its element type and length, created and read back through [`TypedExecutor`]
//! (implemented for every executor). A device-resident array read in place is a borrowed
//! [`BufferRef`]. Kernels are launched through the typed launchers that the algorithms crate
//! generates from each kernel's C prototype (its build script): a launcher takes a
//! [`Program`], a [`Grid`] and one Rust argument per kernel parameter: a buffer of the
//! parameter's element type ([`DeviceSlice`]), a scalar by value ([`KernelScalar`]) or the
//! size of the local-memory parameter ([`Local`]).
//!
//! Byte order: elements are stored in the host's byte order, which is the devices' (every
//! supported host and device is little-endian).

use std::fmt;
use std::marker::PhantomData;

use bytemuck::Pod;

use super::{Executor, KernelArg};
use crate::array::Array;
use crate::dtype::DType;
use crate::error::{BridgeError, Result};
use crate::kernel::KernelSource;

/// An element type of device buffers and kernel parameters: the fixed-size numbers a kernel
/// reads and writes (also `u32` and `u64`, which no [`Array`] dtype has).
pub trait DeviceElement: Pod + Send + Sync + fmt::Debug + 'static {
    /// The C name of the type in a kernel (`uint`, `float`, ...).
    const C_NAME: &'static str;
    /// The [`Array`] dtype of the same elements, if there is one.
    const DTYPE: Option<DType>;
}

macro_rules! device_element {
    ($t:ty, $c:literal, $d:expr) => {
        impl DeviceElement for $t {
            const C_NAME: &'static str = $c;
            const DTYPE: Option<DType> = $d;
        }
    };
}
device_element!(u8, "uchar", Some(DType::U8));
device_element!(u16, "ushort", Some(DType::U16));
device_element!(u32, "uint", None);
device_element!(i32, "int", Some(DType::I32));
device_element!(u64, "ulong", None);
device_element!(i64, "long", Some(DType::I64));
device_element!(f32, "float", Some(DType::F32));
device_element!(f64, "double", Some(DType::F64));

/// A device buffer of `len` elements of `T` on executor `E`'s device (freed when dropped).
pub struct Buffer<E: Executor, T: DeviceElement> {
    raw: E::Buffer,
    len: usize,
    _t: PhantomData<T>,
}

impl<E: Executor, T: DeviceElement> Buffer<E, T> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes (of the elements; the allocation may be larger).
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The executor's raw buffer.
    pub fn raw(&self) -> &E::Buffer {
        &self.raw
    }

    /// A borrowed view of the buffer.
    pub fn view(&self) -> BufferRef<'_, E, T> {
        BufferRef {
            raw: &self.raw,
            len: self.len,
            _t: PhantomData,
        }
    }
}

impl<E: Executor, T: DeviceElement> Buffer<E, T> {
    /// The same device memory read as elements of `U` (a work buffer reused for data of
    /// another type): as many `U` as its bytes hold.
    pub fn reinterpret<U: DeviceElement>(&self) -> BufferRef<'_, E, U> {
        BufferRef {
            raw: &self.raw,
            len: self.bytes() / std::mem::size_of::<U>(),
            _t: PhantomData,
        }
    }
}

impl<E: Executor, T: DeviceElement> fmt::Debug for Buffer<E, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buffer<{}>[{}]", T::C_NAME, self.len)
    }
}

/// A borrowed device buffer of `len` elements of `T`: the memory of a device-resident
/// [`Array`] read in place ([`TypedExecutor::buffer_ref`]) or a view of a [`Buffer`].
pub struct BufferRef<'a, E: Executor, T: DeviceElement> {
    raw: &'a E::Buffer,
    len: usize,
    _t: PhantomData<T>,
}

impl<E: Executor, T: DeviceElement> Clone for BufferRef<'_, E, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: Executor, T: DeviceElement> Copy for BufferRef<'_, E, T> {}

impl<E: Executor, T: DeviceElement> fmt::Debug for BufferRef<'_, E, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufferRef<{}>[{}]", T::C_NAME, self.len)
    }
}

/// Device memory holding elements of one type: what a buffer parameter of a typed launcher
/// accepts ([`Buffer`] and [`BufferRef`]).
pub trait DeviceSlice<E: Executor> {
    /// The element type.
    type Elem: DeviceElement;
    /// The executor's raw buffer.
    fn raw(&self) -> &E::Buffer;
    /// The number of elements.
    fn len(&self) -> usize;
    /// Whether it holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<E: Executor, T: DeviceElement> DeviceSlice<E> for Buffer<E, T> {
    type Elem = T;
    fn raw(&self) -> &E::Buffer {
        &self.raw
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl<E: Executor, T: DeviceElement> DeviceSlice<E> for BufferRef<'_, E, T> {
    type Elem = T;
    fn raw(&self) -> &E::Buffer {
        self.raw
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// `n` elements of `T` in bytes, or a typed error naming `what` when that overflows.
fn bytes_of<T>(n: usize, what: &str) -> Result<usize> {
    n.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| BridgeError::invalid_argument(what, format!("{n} elements overflow")))
}

/// Typed transfers over any [`Executor`] (implemented for every executor).
pub trait TypedExecutor: Executor {
    /// A buffer holding `data` (one transfer).
    fn upload_slice<T: DeviceElement>(&self, data: &[T]) -> Result<Buffer<Self, T>> {
        Ok(Buffer {
            raw: self.upload(bytemuck::cast_slice(data))?,
            len: data.len(),
            _t: PhantomData,
        })
    }

    /// A buffer of `len` elements that `fill` writes on the host (every element), in one
    /// transfer: the host memory is the executor's where it has memory its device reads
    /// directly ([`Executor::upload_filled`]), else the front of `scratch`.
    fn upload_filled_elems<T: DeviceElement>(
        &self,
        len: usize,
        scratch: &mut Vec<u64>,
        fill: impl FnOnce(&mut [T]) -> Result<()>,
    ) -> Result<Buffer<Self, T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            BridgeError::invalid_argument("upload", format!("{len} elements overflow"))
        })?;
        let mut fill = Some(fill);
        let raw = self.upload_filled(bytes, scratch, &mut |b: &mut [u8]| {
            let elems = bytemuck::try_cast_slice_mut::<u8, T>(b).map_err(|e| {
                BridgeError::backend(
                    "upload",
                    None,
                    format!(
                        "{}: the executor's host memory cannot hold the elements: {e}",
                        self.device()
                    ),
                )
            })?;
            match fill.take() {
                Some(f) => f(elems),
                None => Ok(()),
            }
        })?;
        Ok(Buffer {
            raw,
            len,
            _t: PhantomData,
        })
    }

    /// A buffer of the elements whose bytes (in the host's order) are `bytes`: for data that
    /// is already packed as bytes (one transfer, no copy); an error when `bytes` is not a whole
    /// number of elements.
    fn upload_bytes<T: DeviceElement>(&self, bytes: &[u8]) -> Result<Buffer<Self, T>> {
        let size = std::mem::size_of::<T>();
        if !bytes.len().is_multiple_of(size) {
            return Err(BridgeError::invalid_argument(
                "upload",
                format!(
                    "{} bytes are not a whole number of {size}-byte elements",
                    bytes.len()
                ),
            ));
        }
        Ok(Buffer {
            raw: self.upload(bytes)?,
            len: bytes.len() / size,
            _t: PhantomData,
        })
    }

    /// An uninitialised buffer of `n` elements.
    fn alloc_elems<T: DeviceElement>(&self, n: usize) -> Result<Buffer<Self, T>> {
        Ok(Buffer {
            raw: self.alloc(bytes_of::<T>(n, "alloc")?)?,
            len: n,
            _t: PhantomData,
        })
    }

    /// A zeroed buffer of `n` elements.
    fn zeroed_elems<T: DeviceElement>(&self, n: usize) -> Result<Buffer<Self, T>> {
        Ok(Buffer {
            raw: self.zeroed(bytes_of::<T>(n, "zeroed")?)?,
            len: n,
            _t: PhantomData,
        })
    }

    /// The first `n` elements of `buf` (only those are transferred), after every launch
    /// enqueued before; an error when `buf` holds fewer.
    fn read_elems<B: DeviceSlice<Self>>(&self, buf: &B, n: usize) -> Result<Vec<B::Elem>> {
        self.read_elems_at(buf, 0, n)
    }

    /// `n` elements of `buf` from element `offset`, after every launch enqueued before; an
    /// error when `buf` holds fewer than `offset + n`.
    fn read_elems_at<B: DeviceSlice<Self>>(
        &self,
        buf: &B,
        offset: usize,
        n: usize,
    ) -> Result<Vec<B::Elem>> {
        let end = offset.checked_add(n).filter(|&e| e <= buf.len());
        if end.is_none() {
            return Err(BridgeError::invalid_argument(
                "read",
                format!(
                    "elements {offset}..{offset}+{n} of a buffer of {} elements",
                    buf.len()
                ),
            ));
        }
        let size = std::mem::size_of::<B::Elem>();
        let bytes = if offset == 0 {
            self.read(buf.raw(), n * size)?
        } else {
            self.read_at(buf.raw(), offset * size, n * size)?
        };
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// The memory of `array` as a typed buffer read in place, when it lives on this executor's
    /// device in this backend's memory and holds elements of `T`; `None` otherwise.
    fn buffer_ref<'a, T: DeviceElement>(&self, array: &'a Array) -> Option<BufferRef<'a, Self, T>> {
        if T::DTYPE != Some(array.dtype()) {
            return None;
        }
        self.buffer_of(array).map(|raw| BufferRef {
            raw,
            len: array.len(),
            _t: PhantomData,
        })
    }
}

impl<E: Executor> TypedExecutor for E {}

/// A scalar kernel parameter passed by value (`uint`, `int`, `ulong`, `long`, `float`,
/// `double`).
pub trait KernelScalar: Pod {
    /// The argument.
    fn arg<'a, B>(self) -> KernelArg<'a, B>;
}

macro_rules! scalar {
    ($t:ty, $v:ident) => {
        impl KernelScalar for $t {
            fn arg<'a, B>(self) -> KernelArg<'a, B> {
                KernelArg::$v(self)
            }
        }
    };
}
scalar!(u32, U32);
scalar!(i32, I32);
scalar!(u64, U64);
scalar!(i64, I64);
scalar!(f32, F32);
scalar!(f64, F64);

/// The size of a kernel's `LOCAL_ARG(T, name)` parameter: this many elements of `T` of local
/// (shared) memory per work group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local<T>(pub usize, pub PhantomData<T>);

impl<T> Local<T> {
    /// `n` elements of local memory.
    pub fn elems(n: usize) -> Self {
        Local(n, PhantomData)
    }

    /// The argument (the size in bytes).
    pub fn arg<'a, B>(self) -> KernelArg<'a, B> {
        KernelArg::Local(self.0 * std::mem::size_of::<T>())
    }
}

/// A launch grid: `global` work items in groups of `local` (1-D or 2-D; see
/// [`Executor::launch`]).
#[derive(Debug, Clone, Copy)]
pub struct Grid<'a> {
    /// Work items per dimension.
    pub global: &'a [usize],
    /// Work-group size per dimension.
    pub local: &'a [usize],
}

impl<'a> Grid<'a> {
    /// `global` work items in groups of `local`.
    pub fn new(global: &'a [usize], local: &'a [usize]) -> Self {
        Grid { global, local }
    }
}

/// One shipped program built with one option set on one executor: what the generated typed
/// launchers of that program launch on.
pub struct Program<'a, E: Executor> {
    exec: &'a E,
    source: &'static KernelSource,
    opts: &'a [&'a str],
}

impl<E: Executor> Clone for Program<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: Executor> Copy for Program<'_, E> {}

impl<E: Executor> fmt::Debug for Program<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Program({} {:?})", self.source.name, self.opts)
    }
}

impl<'a, E: Executor> Program<'a, E> {
    /// `source` built with `opts` on `exec` (built on first launch and cached by the executor).
    pub fn new(exec: &'a E, source: &'static KernelSource, opts: &'a [&'a str]) -> Self {
        Program { exec, source, opts }
    }

    /// The executor.
    pub fn executor(&self) -> &'a E {
        self.exec
    }

    /// The build options.
    pub fn options(&self) -> &'a [&'a str] {
        self.opts
    }

    /// Launches `entry` with untyped arguments: what the generated launchers call.
    pub fn launch_args(
        &self,
        entry: &str,
        grid: Grid<'_>,
        args: &[KernelArg<'_, E::Buffer>],
    ) -> Result<()> {
        self.exec
            .launch(self.source, self.opts, entry, grid.global, grid.local, args)
    }
}
