//! [`OpenClExecutor`]: the [`Executor`] of an OpenCL device (raw buffer: [`ClBuffer`]).

use std::sync::Arc;

use bridge_core::exec::{Executor, KernelArg, sealed};
use bridge_core::kernel::KernelSource;
use bridge_core::{Array, Device, Result};

use crate::backend::OpenClBackend;
use crate::buffer::{ClBuffer, ClStorage};

/// The executor of one OpenCL device on a backend instance (usually [`crate::shared`]).
///
/// Each kernel is built once per backend, device, source, options and entry point and kept
/// (its arguments set under a lock, then launched); a launch returns when its kernel has run
/// (non-blocking launches wait for event profiling, which would keep the pipelines' kernel
/// times exact).
#[derive(Debug, Clone)]
pub struct OpenClExecutor {
    cl: Arc<OpenClBackend>,
    device: Device,
    fp64: bool,
    cpu: bool,
}

impl OpenClExecutor {
    /// The executor of `device` (`opencl:N`) on `cl`: what it knows of the device (doubles,
    /// type) is asked once per device and backend instance and kept there
    /// ([`OpenClBackend::executors_created`]); its queue, pool and programs are the backend's.
    /// [`bridge_core::BridgeError::BackendUnavailable`] / `UnknownDevice` without the device.
    pub fn new(cl: Arc<OpenClBackend>, device: Device) -> Result<Self> {
        let info = cl.executor_info(device)?;
        Ok(OpenClExecutor {
            cl,
            device,
            fp64: info.fp64,
            cpu: info.cpu,
        })
    }

    /// The executor of `opencl:n` on the process-wide backend ([`crate::shared`]).
    pub fn on_shared(n: usize) -> Result<Self> {
        Self::new(crate::shared(), Device::OpenCl(n))
    }

    /// The executor of the device `buffer` lives on, on the backend instance that allocated it
    /// (the array carries its device: no process-wide lookup).
    /// [`bridge_core::BridgeError::BackendUnavailable`] when that backend instance has been
    /// dropped while the buffer lived on.
    pub fn of_buffer(buffer: &ClBuffer) -> Result<Self> {
        let device = buffer.state.device();
        let inner = buffer
            .state
            .backend
            .upgrade()
            .and_then(|b| b.downcast::<crate::backend::Inner>().ok())
            .ok_or_else(|| {
            bridge_core::BridgeError::unavailable(
                "opencl",
                format!(
                    "the OpenCL backend instance that allocated this array on {device} has been \
                     dropped; keep it (or the registry holding it) alive while its arrays are used"
                ),
            )
        })?;
        Self::new(Arc::new(OpenClBackend { inner }), device)
    }

    /// The executor of the device `array` lives on ([`Self::of_buffer`]); `Unsupported` for an
    /// array that is not OpenCL memory.
    pub fn of_array(array: &Array) -> Result<Self> {
        Self::of_buffer(OpenClBackend::buffer(array)?)
    }

    /// The backend instance.
    pub fn backend(&self) -> &Arc<OpenClBackend> {
        &self.cl
    }
}

impl sealed::Sealed for OpenClExecutor {}

impl Executor for OpenClExecutor {
    type Buffer = ClBuffer;

    fn device(&self) -> Device {
        self.device
    }

    fn has_fp64(&self) -> bool {
        self.fp64
    }

    fn is_cpu(&self) -> bool {
        self.cpu
    }

    fn upload(&self, bytes: &[u8]) -> Result<ClBuffer> {
        let buf = self.cl.alloc(self.device, bytes.len().max(4))?;
        if !bytes.is_empty() {
            buf.write(0, bytes)?;
        }
        self.cl.count_upload(self.device, bytes.len());
        Ok(buf)
    }

    fn alloc(&self, bytes: usize) -> Result<ClBuffer> {
        self.cl.alloc(self.device, bytes.max(4))
    }

    fn zeroed(&self, bytes: usize) -> Result<ClBuffer> {
        self.cl.alloc_zeroed(self.device, bytes.max(4))
    }

    fn launch(
        &self,
        program: &'static KernelSource,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[KernelArg<'_, ClBuffer>],
    ) -> Result<()> {
        let kernel = self.cl.cached_kernel(self.device, program, opts, entry)?;
        let mut k = kernel.lock().unwrap_or_else(|p| p.into_inner());
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            let set = match a {
                KernelArg::Buf(b) => k.arg_buffer(i, b).map(|_| ()),
                KernelArg::U32(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::I32(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::U64(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::I64(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::F32(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::F64(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::Local(bytes) => k.arg_local(i, (*bytes).max(1)).map(|_| ()),
            };
            if let Err(e) = set {
                k.clear_buffers();
                return Err(e);
            }
        }
        let r = k.launch(global, Some(local));
        // a kept kernel must not keep its buffers (they go back to the pool when dropped)
        k.clear_buffers();
        r
    }

    fn read(&self, buf: &ClBuffer, bytes: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; bytes];
        if bytes > 0 {
            buf.read(0, &mut out)?;
        }
        Ok(out)
    }

    fn read_at(&self, buf: &ClBuffer, offset: usize, bytes: usize) -> Result<Vec<u8>> {
        // checked before anything is allocated, and for empty reads too
        buf.check_range(offset, bytes, "read_at")?;
        let mut out = vec![0u8; bytes];
        if bytes > 0 {
            buf.read(offset, &mut out)?;
        }
        Ok(out)
    }

    fn synchronize(&self) -> Result<()> {
        // Launches wait for their kernel on this backend (so the pipelines' kernel times are
        // the kernels' own without event profiling).
        Ok(())
    }

    fn buffer_of<'a>(&self, array: &'a Array) -> Option<&'a ClBuffer> {
        if array.device() != self.device {
            return None;
        }
        array.storage::<ClStorage>().map(ClStorage::buffer)
    }
}
