//! Device buffers, the pool allocator behind them, the [`Storage`] type that puts them in an
//! [`Array`](bridge_core::Array), and [`Pending`], the ready token of non-blocking work.

use std::fmt;
use std::sync::Arc;

use bridge_core::memory::PoolBlock;
use bridge_core::{BridgeError, Device, Element, MemoryType, Result, Storage};
use opencl3::memory::{Buffer, ClMem};
use opencl3::types::cl_mem;

use crate::error::{BACKEND, cl_error, is_oom_code};
use crate::raw;
use crate::state::DeviceState;

// The pool allocator is defined with the device state that owns the pool.
pub use crate::state::ClAllocator;

/// Chunk size of copies staged through host memory (between contexts).
pub const STAGING_CHUNK: usize = 64 << 20;

/// The memory behind a [`ClBuffer`]: a pool block, or a sub-buffer of another.
enum Mem {
    Pool(PoolBlock<ClAllocator>),
    Sub {
        buf: Buffer<u8>,
        // Keeps the parent's pool block out of the cache while the sub-buffer lives.
        _parent: Arc<Mem>,
    },
}

impl Mem {
    fn raw(&self) -> cl_mem {
        match self {
            Mem::Pool(b) => b.get(),
            Mem::Sub { buf, .. } => buf.get(),
        }
    }

    fn buffer(&self) -> &Buffer<u8> {
        match self {
            Mem::Pool(b) => b,
            Mem::Sub { buf, .. } => buf,
        }
    }
}

/// A region of device memory on one OpenCL device.
///
/// Cloning is cheap and shares the memory (like an `Arc`); the memory returns to the device's
/// pool when the last clone (and every sub-region) is dropped. Contents of a fresh buffer are
/// unspecified. Its transfers go through the device's in-order queue, so commands issued from
/// one thread execute in order (except the executor's uploads into fresh buffers, written on
/// the device's transfer queue: [`crate::OpenClExecutor`]); the blocking methods return when
/// the data is complete.
#[derive(Clone)]
pub struct ClBuffer {
    mem: Arc<Mem>,
    len: usize,
    pub(crate) state: Arc<DeviceState>,
}

impl fmt::Debug for ClBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClBuffer({} bytes on {})", self.len, self.state.device())
    }
}

impl ClBuffer {
    pub(crate) fn from_block(
        block: PoolBlock<ClAllocator>,
        len: usize,
        state: Arc<DeviceState>,
    ) -> Self {
        ClBuffer {
            mem: Arc::new(Mem::Pool(block)),
            len,
            state,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device (`opencl:N`).
    pub fn device(&self) -> Device {
        self.state.device()
    }

    /// The raw `cl_mem` handle, for interoperation with other OpenCL code. It stays valid while
    /// this buffer (or a clone) lives.
    pub fn as_raw(&self) -> cl_mem {
        self.mem.raw()
    }

    /// The required alignment in bytes of a [`sub_region`](Self::sub_region) offset on this
    /// device (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`).
    pub fn sub_region_alignment(&self) -> usize {
        self.state.entry.base_align
    }

    /// Whether `self` and `other` live in the same OpenCL context (so that device-side copies
    /// between them are possible).
    pub fn same_context(&self, other: &ClBuffer) -> bool {
        Arc::ptr_eq(&self.state.context, &other.state.context)
    }

    /// `offset..offset + len` lies inside the buffer (else `InvalidArgument` naming `what`).
    pub(crate) fn check_range(&self, offset: usize, len: usize, what: &str) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(BridgeError::invalid_argument(
                what,
                format!(
                    "range {offset}..{} is outside the buffer of {} bytes",
                    offset.saturating_add(len),
                    self.len
                ),
            )),
        }
    }

    fn err(&self, what: &str, code: i32, bytes: usize) -> BridgeError {
        cl_error(self.device(), what, code, bytes as u64)
    }

    /// A sub-region `offset..offset + len` sharing this buffer's memory: an OpenCL sub-buffer,
    /// usable everywhere a buffer is (transfers, kernel arguments). `offset` must be a multiple
    /// of [`sub_region_alignment`](Self::sub_region_alignment) (an OpenCL rule).
    pub fn sub_region(&self, offset: usize, len: usize) -> Result<ClBuffer> {
        self.check_range(offset, len, "sub_region")?;
        let align = self.sub_region_alignment();
        if !offset.is_multiple_of(align) {
            return Err(BridgeError::invalid_argument(
                "sub_region offset",
                format!(
                    "{offset} is not a multiple of the device's base address alignment ({align} bytes)"
                ),
            ));
        }
        if len == 0 {
            return Ok(ClBuffer {
                mem: Arc::clone(&self.mem),
                len: 0,
                state: Arc::clone(&self.state),
            });
        }
        let buf = raw::create_sub_buffer(self.mem.buffer(), offset, len)
            .map_err(|c| self.err("clCreateSubBuffer", c, len))?;
        Ok(ClBuffer {
            mem: Arc::new(Mem::Sub {
                buf,
                _parent: Arc::clone(&self.mem),
            }),
            len,
            state: Arc::clone(&self.state),
        })
    }

    /// Copy `data` into the buffer at byte `offset`; returns when the copy is complete.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len(), "write")?;
        raw::write_blocking(&self.state.queue, self.as_raw(), offset, data)
            .map_err(|c| self.err("clEnqueueWriteBuffer", c, data.len()))
    }

    /// [`Self::write`] on the device's transfer queue instead of its kernel queue: the copy
    /// does not wait for the kernels queued before it. Only for a buffer no queued command uses
    /// (a fresh allocation: [`Executor::upload`](bridge_core::exec::Executor::upload)); returns
    /// when the copy is complete, so commands enqueued afterwards on any queue see the bytes.
    pub(crate) fn write_fresh(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len(), "write")?;
        raw::write_blocking(&self.state.transfer, self.as_raw(), offset, data)
            .map_err(|c| self.err("clEnqueueWriteBuffer", c, data.len()))
    }

    /// Copy bytes from the buffer at `offset` into `out`; returns when the copy is complete.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len(), "read")?;
        raw::read_blocking(&self.state.queue, self.as_raw(), offset, out)
            .map_err(|c| self.err("clEnqueueReadBuffer", c, out.len()))
    }

    /// Copy typed elements into the start of the buffer (blocking).
    pub fn write_slice<T: Element>(&self, data: &[T]) -> Result<()> {
        self.write(0, bytemuck::cast_slice(data))
    }

    /// Read the whole buffer as elements of `T` (blocking). The length must be a multiple of
    /// `size_of::<T>()`.
    pub fn read_vec<T: Element>(&self) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>();
        if !self.len.is_multiple_of(size) {
            return Err(BridgeError::shape_mismatch(
                format!("a multiple of {size} bytes"),
                format!("{} bytes", self.len),
                "ClBuffer::read_vec",
            ));
        }
        let mut v = vec![T::default(); self.len / size];
        self.read(0, bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }

    /// Set every element to `value` (blocking). The length must be a multiple of
    /// `size_of::<T>()`. `fill(0u8)` zeroes the buffer.
    pub fn fill<T: Element>(&self, value: T) -> Result<()> {
        let size = std::mem::size_of::<T>();
        if !self.len.is_multiple_of(size) {
            return Err(BridgeError::shape_mismatch(
                format!("a multiple of {size} bytes"),
                format!("{} bytes", self.len),
                "ClBuffer::fill",
            ));
        }
        if self.len == 0 {
            return Ok(());
        }
        let ev = raw::fill(
            &self.state.queue,
            self.as_raw(),
            bytemuck::bytes_of(&value),
            0,
            self.len,
        )
        .map_err(|c| self.err("clEnqueueFillBuffer", c, self.len))?;
        raw::wait(&ev).map_err(|c| self.err("clEnqueueFillBuffer (wait)", c, self.len))
    }

    /// Start copying `data` into the buffer at `offset` without waiting. The returned token owns
    /// `data` until the copy is done and gives it back from [`Pending::wait`].
    pub fn write_async(&self, offset: usize, data: Vec<u8>) -> Result<Pending<Vec<u8>>> {
        self.check_range(offset, data.len(), "write_async")?;
        let n = data.len();
        let flight = raw::write_async(&self.state.queue, self.as_raw(), offset, data)
            .map_err(|c| self.err("clEnqueueWriteBuffer", c, n))?;
        Ok(Pending::new(flight, Some(self.clone()), self.device(), Ok))
    }

    /// Start copying `len` bytes at `offset` to a new host vector without waiting; the vector
    /// comes from [`Pending::wait`].
    pub fn read_async(&self, offset: usize, len: usize) -> Result<Pending<Vec<u8>>> {
        self.check_range(offset, len, "read_async")?;
        let flight = raw::read_async(&self.state.queue, self.as_raw(), offset, len)
            .map_err(|c| self.err("clEnqueueReadBuffer", c, len))?;
        Ok(Pending::new(flight, Some(self.clone()), self.device(), Ok))
    }

    /// Copy `len` bytes from `src` at `src_offset` into this buffer at `dst_offset`, returning
    /// when the copy is complete. Within one context this is a device-side copy on this
    /// buffer's queue; across contexts (other platforms) it is staged through host memory in
    /// chunks of [`STAGING_CHUNK`] bytes.
    pub fn copy_from(
        &self,
        src: &ClBuffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        src.check_range(src_offset, len, "copy_from source")?;
        self.check_range(dst_offset, len, "copy_from destination")?;
        if len == 0 {
            return Ok(());
        }
        if self.same_context(src) {
            if !Arc::ptr_eq(&self.state, &src.state) {
                // Commands the source's queue still has in flight must land first.
                raw::finish(&src.state.queue).map_err(|c| src.err("clFinish", c, 0))?;
            }
            let ev = raw::copy(
                &self.state.queue,
                src.as_raw(),
                self.as_raw(),
                src_offset,
                dst_offset,
                len,
            )
            .map_err(|c| self.err("clEnqueueCopyBuffer", c, len))?;
            raw::wait(&ev).map_err(|c| self.err("clEnqueueCopyBuffer (wait)", c, len))
        } else {
            let mut stage = vec![0u8; len.min(STAGING_CHUNK)];
            let mut done = 0;
            while done < len {
                let n = (len - done).min(STAGING_CHUNK);
                src.read(src_offset + done, &mut stage[..n])?;
                self.write(dst_offset + done, &stage[..n])?;
                done += n;
            }
            Ok(())
        }
    }

    /// Wait until every command queued on this buffer's device has completed.
    pub fn synchronize(&self) -> Result<()> {
        raw::finish(&self.state.queue).map_err(|c| self.err("clFinish", c, 0))
    }
}

/// [`Storage`] of an OpenCL [`Array`](bridge_core::Array): one [`ClBuffer`] holding the
/// elements in C order from offset 0.
#[derive(Debug, Clone)]
pub struct ClStorage {
    buffer: ClBuffer,
}

impl ClStorage {
    /// Wrap a buffer.
    pub fn new(buffer: ClBuffer) -> Self {
        ClStorage { buffer }
    }

    /// The buffer.
    pub fn buffer(&self) -> &ClBuffer {
        &self.buffer
    }

    /// Take the buffer out.
    pub fn into_buffer(self) -> ClBuffer {
        self.buffer
    }
}

impl Storage for ClStorage {
    fn memory_type(&self) -> MemoryType {
        MemoryType::OpenCl
    }
    fn device(&self) -> Device {
        self.buffer.device()
    }
    fn nbytes(&self) -> usize {
        self.buffer.len()
    }
}

type Finish<T> = Box<dyn FnOnce(Vec<u8>) -> Result<T> + Send>;

/// The ready token of non-blocking work (a transfer or a kernel launch): the result is only
/// reachable through [`wait`](Pending::wait), so a consumer cannot see incomplete data.
///
/// The token owns the host memory and keeps the device buffers involved alive until the work
/// is done; dropping it without waiting blocks until then too (it never leaves the driver
/// writing into freed memory).
#[must_use = "the data is only complete after `wait`"]
pub struct Pending<T> {
    // Field order matters: `flight` drops (waits) before the buffers it uses.
    flight: raw::InFlight,
    _keep: Option<ClBuffer>,
    _keep_more: Vec<ClBuffer>,
    device: Device,
    finish: Finish<T>,
}

impl<T> fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pending({:?} on {})", self.flight, self.device)
    }
}

impl<T> Pending<T> {
    pub(crate) fn new(
        flight: raw::InFlight,
        keep: Option<ClBuffer>,
        device: Device,
        finish: impl FnOnce(Vec<u8>) -> Result<T> + Send + 'static,
    ) -> Self {
        Pending {
            flight,
            _keep: keep,
            _keep_more: Vec::new(),
            device,
            finish: Box::new(finish),
        }
    }

    pub(crate) fn keeping(mut self, buffers: Vec<ClBuffer>) -> Self {
        self._keep_more = buffers;
        self
    }

    /// Chain a step that turns the result into another once the work is complete.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> Result<U> + Send + 'static) -> Pending<U>
    where
        T: 'static,
    {
        let Pending {
            flight,
            _keep,
            _keep_more,
            device,
            finish,
        } = self;
        Pending {
            flight,
            _keep,
            _keep_more,
            device,
            finish: Box::new(move |v| f(finish(v)?)),
        }
    }

    /// The device the work runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// True when the work has finished (successfully or not); `wait` will not block then.
    pub fn is_complete(&self) -> Result<bool> {
        self.flight
            .is_complete()
            .map_err(|c| cl_error(self.device, "clGetEventInfo", c, 0))
    }

    /// Block until the work is complete and return its result.
    pub fn wait(self) -> Result<T> {
        self.wait_profiled("command").map(|(v, _)| v)
    }

    /// [`wait`](Self::wait), with the device time of the command in nanoseconds (from the
    /// queue's event profiling; `None` for work with nothing to wait for). A failure names the
    /// command `what` (a kernel's name, for a launch).
    pub(crate) fn wait_profiled(self, what: &str) -> Result<(T, Option<u64>)> {
        let Pending {
            flight,
            finish,
            device,
            ..
        } = self;
        let (host, ns) = flight.wait_profiled().map_err(|c| {
            if is_oom_code(c) {
                cl_error(device, "waiting for an event", c, 0)
            } else {
                BridgeError::backend(
                    BACKEND,
                    Some(i64::from(c)),
                    format!("{what} on {device} failed while waiting for it"),
                )
            }
        })?;
        Ok((finish(host)?, ns))
    }
}
