//! The executor: the few device operations a device algorithm needs, over one portable kernel
//! source ([`crate::kernel::KernelSource`]).
//!
//! [`Executor`] is implemented by `bridge_opencl::OpenClExecutor` and `bridge_cuda::CudaExecutor`
//! (each with its own raw buffer type: an OpenCL `cl_mem` or a CUDA device allocation). The
//! algorithms are written once, generic over it (`algorithms::detect::GpuDetect<E>`,
//! `algorithms::paco::GpuPaco<E>`), so the OpenCL path that CI runs on PoCL is the path a GPU
//! runs. The trait is sealed: its contract (below) is what the algorithms rely on, and only the
//! workspace's backends implement it.
//!
//! **Completion contract.** [`Executor::launch`] enqueues in order on the executor's queue or
//! stream and may return before the kernel has run (OpenCL always, CUDA by default:
//! [`Executor::launches_are_async`]); [`Executor::read`], [`Executor::read_at`] and
//! [`Executor::synchronize`] return after every launch enqueued before them has completed.
//! [`Executor::upload`] fills a new buffer, which no launch uses yet: it may run beside the
//! launches in flight instead of after them, and every launch enqueued after it sees its bytes
//! (OpenCL writes it on a transfer queue of the device and returns once they are there; CUDA
//! queues it on the executor's stream, before the launches that follow).
//! A kernel that fails after its launch returned is reported as an error by such a wait (on
//! OpenCL, also by a later launch that waits for the oldest of too many in flight), never
//! dropped. Buffers are freed when dropped (back to the device pools), after the work using
//! them: dropping a buffer a queued kernel still uses is allowed, and its memory is not handed
//! to another allocation before that kernel has run.
//!
//! **Kernel time.** The host time around an asynchronous launch is not its kernel's time.
//! [`Executor::kernel_seconds`] is the device's own account where the backend keeps one (OpenCL,
//! from the queue's event profiling); CUDA returns `None` for now (it could record events
//! around its launches), and its kernel times are then only known where each launch is waited
//! for (`ARRAYBRIDGE_TRACE=1`, `ARRAYBRIDGE_CUDA_LAUNCH=sync`).
//!
//! **Device-resident inputs.** [`Executor::buffer_of`] gives the raw buffer of an [`Array`] that
//! already lives on the executor's device, without a copy: an algorithm handed such an array
//! reads it in place.

use crate::array::Array;
use crate::device::Device;
use crate::error::Result;
use crate::kernel::KernelSource;

mod typed;
pub use typed::{
    Buffer, BufferRef, DeviceElement, DeviceSlice, Grid, KernelScalar, Local, Program,
    TypedExecutor,
};

/// Only the workspace's backends implement [`Executor`].
#[doc(hidden)]
pub mod sealed {
    /// The seal.
    pub trait Sealed {}
}

/// A kernel argument for [`Executor::launch`]: a buffer, a scalar passed by value (no upload),
/// or the size of the local-memory parameter.
#[derive(Debug)]
pub enum KernelArg<'a, B> {
    /// A device buffer (passed as a pointer / `__global` buffer).
    Buf(&'a B),
    /// A `uint`.
    U32(u32),
    /// An `int`.
    I32(i32),
    /// A `ulong` (`unsigned long long` on CUDA).
    U64(u64),
    /// A `long` (`long long` on CUDA).
    I64(i64),
    /// A `float`.
    F32(f32),
    /// A `double` (only for devices with doubles: [`Executor::has_fp64`]).
    F64(f64),
    /// The kernel's `LOCAL_ARG` parameter: this many bytes of local (shared) memory per work
    /// group, sized at launch ([`crate::kernel`]). At most one per launch.
    Local(usize),
}

/// The first `bytes` bytes of `scratch`, which grows (zero-filled) to hold them: the host
/// memory of [`Executor::upload_filled`]'s default, 8-byte aligned.
fn scratch_bytes(scratch: &mut Vec<u64>, bytes: usize) -> &mut [u8] {
    let words = bytes.div_ceil(8);
    if scratch.len() < words {
        scratch.resize(words, 0);
    }
    &mut bytemuck::cast_slice_mut::<u64, u8>(scratch)[..bytes]
}

/// [`Executor::upload_filled`]'s default, for executors that override it only for some
/// uploads: `fill` writes the front of `scratch` (grown as needed, 8-byte aligned), then one
/// [`Executor::upload`].
pub fn upload_through_scratch<E: Executor>(
    e: &E,
    bytes: usize,
    scratch: &mut Vec<u64>,
    fill: &mut dyn FnMut(&mut [u8]) -> Result<()>,
) -> Result<E::Buffer> {
    let host = scratch_bytes(scratch, bytes);
    fill(host)?;
    e.upload(host)
}

/// Device buffers, uploads, downloads, launches of portable kernels and synchronisation on one
/// device. See the [module docs](self) for the completion contract.
pub trait Executor: sealed::Sealed + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The executor's raw device buffer.
    type Buffer: Send + Sync;

    /// The device.
    fn device(&self) -> Device;
    /// Whether the device has doubles.
    fn has_fp64(&self) -> bool;
    /// Whether the device is a CPU (PoCL): algorithms pick smaller work groups there.
    fn is_cpu(&self) -> bool;
    /// A buffer holding `bytes` (one transfer; at least 4 bytes are allocated).
    fn upload(&self, bytes: &[u8]) -> Result<Self::Buffer>;
    /// A buffer of `bytes` bytes that `fill` writes on the host (every byte), in one transfer.
    /// An executor may hand `fill` memory its device reads directly (CUDA: a page-locked buffer
    /// reused once its copy has completed, so the upload is one DMA instead of a copy into
    /// staging chunks and their DMAs); the default fills the front of `scratch` (grown as
    /// needed: a caller that keeps it pays its page faults once) and calls
    /// [`Executor::upload`]. The memory `fill` gets is 8-byte aligned, so it may be cast to
    /// any device element type.
    fn upload_filled(
        &self,
        bytes: usize,
        scratch: &mut Vec<u64>,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<Self::Buffer> {
        upload_through_scratch(self, bytes, scratch, fill)
    }
    /// An uninitialised buffer of `bytes` bytes (at least 4).
    fn alloc(&self, bytes: usize) -> Result<Self::Buffer>;
    /// A zeroed buffer of `bytes` bytes (at least 4).
    fn zeroed(&self, bytes: usize) -> Result<Self::Buffer>;
    /// Launch `entry` of `program` built with `opts` (`-D` defines) on a grid of `global` work
    /// items in groups of `local` (1-D or 2-D, `global` a multiple of `local`).
    fn launch(
        &self,
        program: &'static KernelSource,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[KernelArg<'_, Self::Buffer>],
    ) -> Result<()>;
    /// The first `bytes` bytes of `buf` (only those are transferred), after every launch
    /// enqueued before.
    fn read(&self, buf: &Self::Buffer, bytes: usize) -> Result<Vec<u8>>;
    /// `bytes` bytes of `buf` from byte `offset` (only those are transferred where the backend
    /// can; the default reads the prefix and cuts it), after every launch enqueued before.
    fn read_at(&self, buf: &Self::Buffer, offset: usize, bytes: usize) -> Result<Vec<u8>> {
        let end = offset.checked_add(bytes).ok_or_else(|| {
            crate::error::BridgeError::invalid_argument("read_at", "offset + bytes overflows")
        })?;
        let mut all = self.read(buf, end)?;
        all.drain(..offset);
        Ok(all)
    }
    /// Wait for every launch enqueued so far.
    fn synchronize(&self) -> Result<()>;
    /// Whether [`Executor::launch`] returns before the kernel has run (a stream-ordered
    /// launch): the host time around a launch is then not the kernel's time (see
    /// [`Executor::kernel_seconds`]).
    fn launches_are_async(&self) -> bool {
        false
    }
    /// The device time, in seconds, of the kernels this executor (and its clones) launched
    /// whose completion a wait has seen so far: a running total, to be differenced around a
    /// run after [`Executor::synchronize`] (or a read) has collected its launches. `None`
    /// where the backend does not measure it (the default; CUDA for now).
    fn kernel_seconds(&self) -> Option<f64> {
        None
    }
    /// The device's memory figures now (total, free where the driver says, the pool's), for
    /// sizing work to what the device has ([`crate::memory::MemoryStats::available`]); `None`
    /// where the backend cannot say (the default).
    fn memory_stats(&self) -> Option<crate::memory::MemoryStats> {
        None
    }
    /// The raw buffer of `array` when it lives on this executor's device in this backend's
    /// memory (zero-copy access for device-resident inputs); `None` otherwise.
    fn buffer_of<'a>(&self, array: &'a Array) -> Option<&'a Self::Buffer>;
}
