//! [`CudaExecutor`]: the [`Executor`] of a CUDA device (raw buffer: [`CudaStorage`]).

use std::sync::Arc;

use bridge_core::exec::{Executor, KernelArg as ExecArg, sealed};
use bridge_core::kernel::KernelSource;
use bridge_core::{Array, Device, Result};

use crate::buffer::{CudaStorage, storage_of};
use crate::device::{Gpu, gpu};
use crate::launch::KernelArg;

/// The executor of one CUDA device. Programs are compiled by NVRTC once per (source, options)
/// and cached by the [`Gpu`].
#[derive(Debug, Clone)]
pub struct CudaExecutor {
    gpu: Arc<Gpu>,
}

impl CudaExecutor {
    /// The executor of CUDA device `ordinal`; [`bridge_core::BridgeError::BackendUnavailable`]
    /// without a driver or that device.
    pub fn new(ordinal: usize) -> Result<Self> {
        Ok(CudaExecutor { gpu: gpu(ordinal)? })
    }

    /// The executor of an opened device.
    pub fn from_gpu(gpu: Arc<Gpu>) -> Self {
        CudaExecutor { gpu }
    }

    /// The device handle.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

impl sealed::Sealed for CudaExecutor {}

impl Executor for CudaExecutor {
    type Buffer = CudaStorage;

    fn device(&self) -> Device {
        self.gpu.device()
    }

    fn has_fp64(&self) -> bool {
        true
    }

    fn is_cpu(&self) -> bool {
        false
    }

    fn upload(&self, bytes: &[u8]) -> Result<CudaStorage> {
        if bytes.is_empty() {
            return self.alloc(4);
        }
        self.gpu.upload_storage(bytes)
    }

    fn alloc(&self, bytes: usize) -> Result<CudaStorage> {
        CudaStorage::alloc(&self.gpu, bytes.max(4))
    }

    fn zeroed(&self, bytes: usize) -> Result<CudaStorage> {
        let st = CudaStorage::alloc(&self.gpu, bytes.max(4))?;
        st.fill_bytes(0)?;
        Ok(st)
    }

    fn launch(
        &self,
        program: &'static KernelSource,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[ExecArg<'_, CudaStorage>],
    ) -> Result<()> {
        let prog = self.gpu.program(program, opts)?;
        let args: Vec<KernelArg<'_>> = args
            .iter()
            .map(|a| match a {
                ExecArg::Buf(b) => KernelArg::Storage(b),
                ExecArg::U32(v) => KernelArg::U32(*v),
            })
            .collect();
        self.gpu
            .launch(&prog, entry, global, Some(local), &args, None)?;
        Ok(())
    }

    fn read(&self, buf: &CudaStorage, bytes: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; bytes];
        self.gpu.read_storage(buf, 0, &mut out)?;
        Ok(out)
    }

    fn synchronize(&self) -> Result<()> {
        // Launches without a stream are blocking (`Gpu::launch` with `stream: None`).
        Ok(())
    }

    fn buffer_of<'a>(&self, array: &'a Array) -> Option<&'a CudaStorage> {
        storage_of(array)
            .ok()
            .filter(|st| st.gpu().device() == self.gpu.device())
    }
}
