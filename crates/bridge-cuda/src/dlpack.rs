//! DLPack exchange of CUDA memory: the [`DlpackExchange`] of bridge-cuda ([`exchange`]), which
//! `Registry::from_dlpack` / `Registry::to_dlpack` use for `cuda:N` (see
//! [`bridge_core::dlpack`]).
//!
//! - **Export** ([`export`]): zero-copy. The DLPack tensor's data pointer is the buffer's device
//!   address and its owner is the [`Array`] itself, so the memory stays out of the pool until
//!   the consumer's deleter runs (then after bridge-cuda's own recorded work on it, as for any
//!   [`CudaStorage`]). Per DLPack the consumer calls the deleter once its own work on the
//!   memory is done.
//! - **Import** ([`CudaDlpack::import`]): zero-copy for a C-contiguous tensor: the memory is
//!   wrapped with [`CudaStorage::from_foreign`], the managed tensor being the owner that the
//!   storage releases (calling the producer's deleter) after its drop-time synchronisation.
//!   A tensor arraybridge exported comes back as the original array. A strided tensor
//!   (a transpose, a step, a broadcast) is gathered into a fresh C-contiguous buffer on the same
//!   device by one kernel (a [`TransferKind::DeviceCopy`]); its memory is read in place and the
//!   producer's deleter runs once that kernel is done.
//!
//! # Streams (the DLPack protocol)
//! - Export for a consumer stream (`__dlpack__(stream=s)`): the producer's pending work on the
//!   buffer (its last recorded use, see [`CudaStorage::wait_on`]) is ordered before an event
//!   recorded on a fresh bridge-cuda stream, and the consumer's stream `s` is made to wait on
//!   that event (`cuStreamWaitEvent`). Nothing blocks the host and nothing synchronises the
//!   device. `-1` (no sync) skips the wait; an omitted stream or `1` means the legacy default
//!   stream, `2` the per-thread default stream, as the protocol defines them.
//! - Import: the consumer (bridge-python) passes an [`ImportStream`] to the producer's
//!   `__dlpack__(stream=…)`, so the producer makes that stream wait on its work, then
//!   [`ImportStream::finish`] synchronises **that stream** (not the device) before bridge-cuda
//!   uses the memory from any of its streams, which the contract of
//!   [`CudaStorage::from_foreign`] requires.

use std::ffi::c_void;
use std::sync::Arc;

use bridge_core::convert::TransferKind;
use bridge_core::dlpack::TensorInfo;
use bridge_core::dlpack::{
    ConsumerStream, DlpackExchange, DlpackTensor, ExportOptions, Exported, RawParts, dl_device,
    export_raw,
};
use bridge_core::exec::{Executor, KernelArg as ExecArg};
use bridge_core::{Array, BridgeError, Device, MemoryType, Result};
use cudarc::driver::CudaStream;
use cudarc::driver::sys::{CUdeviceptr, CUevent_wait_flags, CUstream};

use crate::buffer::{CudaStorage, storage_of};
use crate::device::{Gpu, gpu};
use crate::error;
use crate::executor::CudaExecutor;

/// bridge-cuda's DLPack exchange, for `Registry::register_dlpack`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CudaDlpack;

/// The exchange to register (`arraybridge::registry()` does).
pub fn exchange() -> Arc<dyn DlpackExchange> {
    Arc::new(CudaDlpack)
}

impl DlpackExchange for CudaDlpack {
    fn memory_type(&self) -> MemoryType {
        MemoryType::Cuda
    }

    fn import(&self, tensor: DlpackTensor) -> Result<(Array, TransferKind, u64)> {
        let tensor = match tensor.take_back() {
            Ok(array) => return Ok((array, TransferKind::ZeroCopy, 0)),
            Err(t) => t,
        };
        let info = tensor.info().clone();
        let Device::Cuda(n) = info.device else {
            return Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Cuda,
                device: info.device,
            });
        };
        if !info.is_contiguous() {
            return gather(&gpu(n)?, tensor, &info);
        }
        let g = gpu(n)?;
        // SAFETY: per the DLPack contract the tensor's memory is device memory of cuda:n
        // (usable from the primary context every CUDA runtime library uses), valid while the
        // managed tensor lives; the storage owns the tensor and releases it after its
        // drop-time synchronisation. The producer's pending work was ordered before the
        // consumer stream, which the importer synchronised (see `ImportStream`).
        let st = unsafe {
            CudaStorage::from_foreign(
                &g,
                info.data as CUdeviceptr,
                info.nbytes(),
                Box::new(tensor),
            )
        }?;
        let a = Array::from_storage(Box::new(st), info.shape.clone(), info.dtype)?;
        Ok((a, TransferKind::ZeroCopy, 0))
    }

    fn export(&self, array: Array, opts: &ExportOptions) -> Result<Exported> {
        export(array, opts)
    }
}

/// The program of the strided gather (a `static`, so the executor's program cache keys on it).
static GATHER: bridge_core::kernel::KernelSource = crate::kernel::GATHER;

/// Gather a strided CUDA tensor into a C-contiguous array on the same device (see the
/// [module docs](self)).
fn gather(
    g: &Arc<Gpu>,
    tensor: DlpackTensor,
    info: &TensorInfo,
) -> Result<(Array, TransferKind, u64)> {
    let es = info.dtype.size_of();
    let overflow =
        || {
            BridgeError::InvalidInput(format!(
            "a DLPack tensor on {} with shape {:?} and strides {:?} addresses more memory than \
             this machine has",
            info.device, info.shape, info.strides
        ).into())
        };
    let out = CudaExecutor::from_gpu(Arc::clone(g))?;
    let len = info.len();
    if len == 0 {
        let st = out.alloc(0)?;
        return Ok((
            Array::from_storage(Box::new(st), info.shape.clone(), info.dtype)?,
            TransferKind::DeviceCopy,
            0,
        ));
    }
    // The span of addressed elements: [lo, hi] relative to element [0, …, 0].
    let (mut lo, mut hi) = (0i64, 0i64);
    for (&d, &s) in info.shape.iter().zip(&info.strides) {
        let reach = i64::try_from(d - 1)
            .ok()
            .and_then(|d| d.checked_mul(s as i64))
            .ok_or_else(overflow)?;
        if reach < 0 {
            lo = lo.checked_add(reach).ok_or_else(overflow)?;
        } else {
            hi = hi.checked_add(reach).ok_or_else(overflow)?;
        }
    }
    let es64 = es as i64;
    let start = (info.data as i64)
        .checked_add(lo.checked_mul(es64).ok_or_else(overflow)?)
        .ok_or_else(overflow)?;
    let span_elems = hi
        .checked_sub(lo)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(overflow)?;
    let span = usize::try_from(span_elems.checked_mul(es64).ok_or_else(overflow)?)
        .map_err(|_| overflow())?;
    // The widest unit (8, 4, 2 or 1 bytes) that divides the element and the start address.
    let unit = [8usize, 4, 2, 1]
        .into_iter()
        .find(|&u| es.is_multiple_of(u) && (start as u64).is_multiple_of(u as u64))
        .unwrap_or(1);
    let k = (es / unit) as i64;
    let mut meta: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
    meta.push(k);
    let ndim = meta.len();
    for &s in &info.strides {
        meta.push((s as i64).checked_mul(k).ok_or_else(overflow)?);
    }
    meta.push(1);
    meta.push(lo.checked_mul(-k).ok_or_else(overflow)?);
    let n = (len as u64).checked_mul(k as u64).ok_or_else(overflow)?;
    // SAFETY: per the DLPack contract every element the tensor addresses is device memory of
    // this device, valid while the managed tensor lives; `[start, start + span)` is exactly the
    // addressed range. The storage owns the tensor and releases it after its last use (the
    // gather below) has completed. The producer's pending work was ordered before the
    // consumer stream, which the importer synchronised (see `ImportStream`).
    let src =
        unsafe { CudaStorage::from_foreign(g, start as CUdeviceptr, span, Box::new(tensor)) }?;
    let meta_bytes: Vec<u8> = meta.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let meta_buf = out.upload(&meta_bytes)?;
    let bytes = len.checked_mul(es).ok_or_else(overflow)?;
    let dst = out.alloc(bytes)?;
    let elem = match unit {
        8 => "-DELEM=ulong",
        4 => "-DELEM=uint",
        2 => "-DELEM=ushort",
        _ => "-DELEM=uchar",
    };
    const WG: usize = 256;
    let groups = usize::try_from(n.div_ceil(WG as u64))
        .unwrap_or(usize::MAX)
        .clamp(1, 1 << 16);
    out.launch(
        &GATHER,
        &[elem],
        "gather",
        &[groups * WG],
        &[WG],
        &[
            ExecArg::Buf(&src),
            ExecArg::Buf(&dst),
            ExecArg::Buf(&meta_buf),
            ExecArg::U32(ndim as u32),
            ExecArg::U32(n as u32),
            ExecArg::U32((n >> 32) as u32),
        ],
    )?;
    // `src` and `meta_buf` are released after the gather (their drop waits for its event).
    drop((src, meta_buf));
    out.synchronize()?;
    let a = Array::from_storage(Box::new(dst), info.shape.clone(), info.dtype)?;
    Ok((a, TransferKind::DeviceCopy, bytes as u64))
}

/// Make `consumer` (a raw `CUstream`, or the protocol's 1 / 2 default-stream handles) wait for
/// the buffer's pending work, through an event on a fresh stream: no host blocking, no device
/// synchronisation.
fn order_before(st: &CudaStorage, g: &Arc<Gpu>, consumer: usize) -> Result<()> {
    let ours = g.new_stream()?;
    st.wait_on(&ours)?;
    let ready = g.record(&ours)?;
    g.context()
        .bind_to_thread()
        .map_err(error::op(g.device(), "cuCtxSetCurrent"))?;
    // SAFETY: `consumer` is a stream handle of this device's primary context given by the
    // consumer (or CU_STREAM_LEGACY / CU_STREAM_PER_THREAD, which are 1 and 2), and the event
    // is a live event of that context; the wait is enqueued now, so the event may be destroyed
    // when `ready` drops.
    unsafe {
        cudarc::driver::result::stream::wait_event(
            consumer as CUstream,
            ready.event().cu_event(),
            CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )
    }
    .map_err(error::op(g.device(), "cuStreamWaitEvent"))
}

/// Export a CUDA array as a DLPack tensor, zero-copy, ordering the consumer's stream after the
/// buffer's pending work (see the [module docs](self)). The array is the owner (taken back
/// without a copy when the tensor comes back to arraybridge).
pub fn export(array: Array, opts: &ExportOptions) -> Result<Exported> {
    let raw = parts(&array, opts)?;
    // SAFETY: the device range is the array's buffer, which the owner keeps out of the pool
    // until the deleter runs; CUDA arrays are C-contiguous with these strides.
    let tensor = unsafe { export_raw(Box::new(array), raw, opts, false)? };
    Ok(Exported {
        tensor,
        copied: false,
    })
}

/// [`export`] of a shared array: the consumer's deleter drops one reference.
pub fn export_shared(array: Arc<Array>, opts: &ExportOptions) -> Result<Exported> {
    let raw = parts(&array, opts)?;
    // SAFETY: as in `export`; the shared array keeps the buffer alive.
    let tensor = unsafe { export_raw(Box::new(array), raw, opts, false)? };
    Ok(Exported {
        tensor,
        copied: false,
    })
}

/// The stream handshake, then the raw parts of a CUDA array.
fn parts(array: &Array, opts: &ExportOptions) -> Result<RawParts> {
    let st = storage_of(array)?;
    let g = Arc::clone(st.gpu());
    match opts.stream {
        ConsumerStream::NoSync => {}
        ConsumerStream::Omitted | ConsumerStream::LegacyDefault => order_before(st, &g, 1)?,
        ConsumerStream::PerThreadDefault => order_before(st, &g, 2)?,
        ConsumerStream::Handle(h) => order_before(st, &g, h)?,
    }
    Ok(RawParts {
        data: st.device_ptr() as usize as *mut c_void,
        shape: array.shape().to_vec(),
        strides: array.strides().to_vec(),
        dtype: array.dtype(),
        device: dl_device(g.device()),
    })
}

/// The consumer stream of a DLPack import on one device (see the [module docs](self)).
#[derive(Debug)]
pub struct ImportStream {
    stream: Arc<CudaStream>,
    device: Device,
}

impl ImportStream {
    /// A fresh stream on `cuda:n`.
    pub fn new(n: usize) -> Result<ImportStream> {
        let g = gpu(n)?;
        Ok(ImportStream {
            stream: g.new_stream()?,
            device: g.device(),
        })
    }

    /// The handle to pass as `__dlpack__(stream=…)`.
    pub fn handle(&self) -> usize {
        self.stream.cu_stream() as usize
    }

    /// Wait (on the host) until the producer's work that the stream was made to wait on is
    /// done: a stream synchronisation, not a device one.
    pub fn finish(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(error::op(self.device, "cuStreamSynchronize"))
    }
}
