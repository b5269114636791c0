//! Device glue shared by the detection and PACO back ends: a small executor trait ([`Exec`])
//! over one portable kernel program, implemented once for OpenCL ([`ClExec`]) and once for
//! CUDA ([`CudaExec`]). The pipelines (`detect/gpu.rs`, `paco/gpu.rs`) are written against
//! the trait, so the OpenCL path that CI runs on PoCL is the path a GPU runs.
//!
//! **Completion contract.** [`Exec::launch`] enqueues in order on the device's queue/stream;
//! [`Exec::read`] returns after every launch before it has completed and the bytes are on the
//! host. Buffers are freed when dropped (back to the device pools), after the work using them.

use bridge_core::kernel::KernelSource;
use bridge_core::{Device, Result};

/// A kernel argument for [`Exec::launch`].
pub(crate) enum Arg<'a, B> {
    /// A device buffer.
    Buf(&'a B),
    /// A `uint`.
    U32(u32),
}

/// The few device operations the pipelines need.
pub(crate) trait Exec {
    /// A device buffer.
    type Buf;
    /// The device.
    fn device(&self) -> Device;
    /// Whether the device has doubles.
    fn has_fp64(&self) -> bool;
    /// Whether the device is a CPU (PoCL): pipelines pick smaller work groups there.
    fn is_cpu(&self) -> bool;
    /// A buffer holding `bytes` (one transfer; at least 4 bytes are allocated).
    fn upload(&self, bytes: &[u8]) -> Result<Self::Buf>;
    /// An uninitialised buffer of `bytes` bytes (at least 4).
    fn alloc(&self, bytes: usize) -> Result<Self::Buf>;
    /// A zeroed buffer of `bytes` bytes (at least 4).
    fn zeroed(&self, bytes: usize) -> Result<Self::Buf>;
    /// Launch `entry` of the executor's program built with `opts` (`-D` defines), on a grid
    /// of `global` work items in groups of `local` (1-D or 2-D, `global` a multiple of
    /// `local`).
    fn launch(
        &self,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[Arg<'_, Self::Buf>],
    ) -> Result<()>;
    /// The first `bytes` bytes of `buf` (only those are transferred).
    fn read(&self, buf: &Self::Buf, bytes: usize) -> Result<Vec<u8>>;
}

/// The OpenCL executor: a backend instance, a device and the program its launches use.
#[cfg(feature = "opencl")]
#[derive(Debug, Clone)]
pub(crate) struct ClExec {
    pub(crate) cl: std::sync::Arc<bridge_opencl::OpenClBackend>,
    pub(crate) dev: Device,
    pub(crate) fp64: bool,
    pub(crate) cpu: bool,
    pub(crate) program: &'static KernelSource,
}

#[cfg(feature = "opencl")]
impl ClExec {
    /// The executor for `dev`, querying its doubles and type once.
    pub(crate) fn new(
        cl: std::sync::Arc<bridge_opencl::OpenClBackend>,
        dev: Device,
        program: &'static KernelSource,
    ) -> Result<Self> {
        let fp64 = cl.check_dtype(dev, bridge_core::DType::F64).is_ok();
        let info = cl.device_info(dev)?;
        let cpu = info.details.iter().any(|(k, v)| k == "type" && v == "cpu");
        Ok(ClExec {
            cl,
            dev,
            fp64,
            cpu,
            program,
        })
    }
}

#[cfg(feature = "opencl")]
impl Exec for ClExec {
    type Buf = bridge_opencl::ClBuffer;

    fn device(&self) -> Device {
        self.dev
    }

    fn has_fp64(&self) -> bool {
        self.fp64
    }

    fn is_cpu(&self) -> bool {
        self.cpu
    }

    fn upload(&self, bytes: &[u8]) -> Result<Self::Buf> {
        let buf = self.cl.alloc(self.dev, bytes.len().max(4))?;
        if !bytes.is_empty() {
            buf.write(0, bytes)?;
        }
        Ok(buf)
    }

    fn alloc(&self, bytes: usize) -> Result<Self::Buf> {
        self.cl.alloc(self.dev, bytes.max(4))
    }

    fn zeroed(&self, bytes: usize) -> Result<Self::Buf> {
        self.cl.alloc_zeroed(self.dev, bytes.max(4))
    }

    fn launch(
        &self,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[Arg<'_, Self::Buf>],
    ) -> Result<()> {
        let prog = self.cl.program_from(self.dev, self.program, opts)?;
        let mut k = prog.kernel(entry)?;
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            match a {
                Arg::Buf(b) => k.arg_buffer(i, b)?,
                Arg::U32(v) => k.arg_scalar(i, *v)?,
            };
        }
        k.launch(global, Some(local))
    }

    fn read(&self, buf: &Self::Buf, bytes: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; bytes];
        if bytes > 0 {
            buf.read(0, &mut out)?;
        }
        Ok(out)
    }
}

/// The CUDA executor: a device and the program its launches use (compiled by NVRTC).
#[cfg(feature = "cuda")]
#[derive(Debug, Clone)]
pub(crate) struct CudaExec {
    pub(crate) gpu: std::sync::Arc<bridge_cuda::Gpu>,
    pub(crate) program: &'static KernelSource,
}

#[cfg(feature = "cuda")]
impl Exec for CudaExec {
    type Buf = bridge_core::Array;

    fn device(&self) -> Device {
        self.gpu.device()
    }

    fn has_fp64(&self) -> bool {
        true
    }

    fn is_cpu(&self) -> bool {
        false
    }

    fn upload(&self, bytes: &[u8]) -> Result<Self::Buf> {
        if bytes.is_empty() {
            return self.alloc(4);
        }
        self.gpu.upload_bytes(bytes)
    }

    fn alloc(&self, bytes: usize) -> Result<Self::Buf> {
        self.gpu.alloc(bridge_core::DType::U8, &[bytes.max(4)])
    }

    fn zeroed(&self, bytes: usize) -> Result<Self::Buf> {
        self.gpu.zeros(bridge_core::DType::U8, &[bytes.max(4)])
    }

    fn launch(
        &self,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[Arg<'_, Self::Buf>],
    ) -> Result<()> {
        let prog = self.gpu.program(self.program, opts)?;
        let args: Vec<bridge_cuda::KernelArg<'_>> = args
            .iter()
            .map(|a| match a {
                Arg::Buf(b) => bridge_cuda::KernelArg::Buffer(b),
                Arg::U32(v) => bridge_cuda::KernelArg::U32(*v),
            })
            .collect();
        self.gpu
            .launch(&prog, entry, global, Some(local), &args, None)?;
        Ok(())
    }

    fn read(&self, buf: &Self::Buf, bytes: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; bytes];
        self.gpu.read_bytes(buf, 0, &mut out)?;
        Ok(out)
    }
}
