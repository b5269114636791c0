//! Launching portable kernels on a [`Gpu`].
//!
//! ```no_run
//! use bridge_cuda::{gpu, storage_of, KernelArg, kernel::KERNELS};
//! use bridge_core::{Array, DType};
//! # fn main() -> bridge_core::Result<()> {
//! let g = gpu(0)?;
//! let x = g.upload(Array::from_ndarray(ndarray::ArrayD::<f32>::ones(vec![1000])).host()?)?;
//! let y = g.zeros(DType::F32, &[1000])?;
//! let prog = g.program(&KERNELS[0], &["-DREAL=float"])?;
//! g.launch(&prog, "axpy", &[1000], None,
//!          &[KernelArg::Buf(storage_of(&y)?), KernelArg::Buf(storage_of(&x)?),
//!            KernelArg::F32(2.0), KernelArg::U32(1000)], None)?;
//! let host = g.download(&y)?; // all 2.0
//! # Ok(()) }
//! ```

use std::ffi::c_void;
use std::sync::Arc;

use bridge_core::{BridgeError, Result};
use cudarc::driver::CudaStream;

use crate::buffer::CudaStorage;
use crate::device::{Gpu, Program, Ready};
use crate::error;
use crate::ffi;
use crate::kernel::LaunchDims;

/// One kernel argument: the workspace's one kernel-argument type
/// ([`bridge_core::exec::KernelArg`]) over CUDA allocations. A buffer is a [`CudaStorage`]
/// (an executor buffer, or an array's memory through [`crate::storage_of`]) and must live on
/// the launching device; scalars must match the kernel's parameter types exactly.
pub type KernelArg<'a> = bridge_core::exec::KernelArg<'a, CudaStorage>;

/// The device allocation of a buffer argument; `None` for scalars.
fn storage<'a>(arg: &KernelArg<'a>) -> Option<&'a CudaStorage> {
    match *arg {
        KernelArg::Buf(st) => Some(st),
        _ => None,
    }
}

/// A scalar's bytes in the low bytes of an 8-byte slot (0 for buffers, which pass their device
/// pointer instead).
fn scalar_word(arg: &KernelArg<'_>) -> u64 {
    match *arg {
        KernelArg::I32(v) => word(&v.to_ne_bytes()),
        KernelArg::U32(v) => word(&v.to_ne_bytes()),
        KernelArg::I64(v) => word(&v.to_ne_bytes()),
        KernelArg::U64(v) => v,
        KernelArg::F32(v) => word(&v.to_ne_bytes()),
        KernelArg::F64(v) => word(&v.to_ne_bytes()),
        // the size itself (checked to fit in 32 bits by `dynamic_shared`)
        KernelArg::Local(b) => word(&(b as u32).to_ne_bytes()),
        KernelArg::Buf(_) => 0,
    }
}

/// The argument's size in bytes as the kernel sees it.
pub fn arg_size(arg: &KernelArg<'_>) -> usize {
    match arg {
        KernelArg::I32(_) | KernelArg::U32(_) | KernelArg::F32(_) | KernelArg::Local(_) => 4,
        _ => 8,
    }
}

/// CUDA's limit of dynamic shared memory per block without the opt-in attribute.
pub const SHARED_DEFAULT_MAX: usize = 48 << 10;

/// Bytes of dynamic shared memory a launch with `args` needs (its one [`KernelArg::Local`], or
/// 0). Two `Local` arguments, or a size beyond 32 bits, are an error.
pub fn dynamic_shared(args: &[KernelArg<'_>]) -> Result<u32> {
    let mut locals = args.iter().filter_map(|a| match a {
        KernelArg::Local(b) => Some(*b),
        _ => None,
    });
    let bytes = locals.next().unwrap_or(0);
    if locals.next().is_some() {
        return Err(BridgeError::invalid_argument(
            "kernel arguments",
            "a CUDA launch takes at most one LOCAL_ARG (one dynamic shared-memory block)",
        ));
    }
    u32::try_from(bytes).map_err(|_| {
        BridgeError::invalid_argument(
            "kernel arguments",
            format!("{bytes} bytes of shared memory per block"),
        )
    })
}

fn word(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    u64::from_ne_bytes(b)
}

impl Gpu {
    /// Launch `entry` of `program` over an OpenCL-style `global` size (1–3 dimensions) with an
    /// optional `local` size (see [`LaunchDims::new`]).
    ///
    /// With `stream: None` the launch runs on a pooled stream and this call returns when the
    /// kernel has finished (blocking contract). With `Some(stream)` it returns at once with a
    /// [`Ready`] event (one per launch, shared by the arguments): the stream first waits for
    /// each buffer argument's earlier uses on other streams, and every buffer argument records
    /// the launch as its pending use, so it cannot be freed or reused before the kernel
    /// completes.
    pub fn launch(
        self: &Arc<Self>,
        program: &Program,
        entry: &str,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[KernelArg<'_>],
        stream: Option<&CudaStream>,
    ) -> Result<Option<Arc<Ready>>> {
        let dims = LaunchDims::new(global, local)?;
        let shared = dynamic_shared(args)?;
        let cached = program.cached_function(entry)?;
        let func = cached.func;
        // One 8-byte slot per argument; the vector is never resized after the pointers are taken.
        let mut slots: Vec<u64> = Vec::with_capacity(args.len());
        let mut buffers = Vec::new();
        for a in args {
            let w = if let Some(st) = storage(a) {
                if st.gpu().device() != self.device() {
                    return Err(BridgeError::invalid_argument(
                        "kernel argument",
                        format!(
                            "buffer on {} passed to a launch on {}",
                            st.gpu().device(),
                            self.device()
                        ),
                    ));
                }
                buffers.push(st);
                st.device_ptr()
            } else {
                scalar_word(a)
            };
            slots.push(w);
        }
        if let Some(sizes) = cached.param_sizes.as_deref() {
            let ours: Vec<usize> = args.iter().map(arg_size).collect();
            if sizes != ours.as_slice() {
                return Err(BridgeError::invalid_argument(
                    "kernel arguments",
                    format!(
                        "{entry} takes parameters of {sizes:?} bytes, got arguments of {ours:?} bytes"
                    ),
                ));
            }
        }
        let mut params: Vec<*mut c_void> =
            slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
        let lease;
        let s: &CudaStream = match stream {
            Some(s) => s,
            None => {
                lease = self.stream()?;
                &lease
            }
        };
        for b in &buffers {
            b.wait_on(s)?;
        }
        if shared as usize > SHARED_DEFAULT_MAX {
            ffi::allow_dynamic_shared(&func, shared, self.device())?;
        }
        // SAFETY: one slot per parameter (counts and sizes checked against the kernel above
        // where the driver can tell) holding the value's bytes (scalars little-endian in the
        // low bytes of an 8-byte slot, device pointers as 64-bit addresses); `slots` outlives the
        // call. Buffer arguments record this launch as pending below, so their memory outlives
        // the kernel. Matching the kernel's signature is the caller's documented duty.
        unsafe {
            ffi::launch(
                &func,
                dims.grid,
                dims.block,
                shared,
                s,
                &mut params,
                self.device(),
            )?
        };
        if stream.is_none() {
            s.synchronize()
                .map_err(error::op(self.device(), "cuStreamSynchronize"))?;
            return Ok(None);
        }
        let ready = Arc::new(self.record(s)?);
        for b in &buffers {
            b.set_pending(Arc::clone(&ready));
        }
        Ok(Some(ready))
    }
}

#[cfg(test)]
mod tests {
    use super::{KernelArg, SHARED_DEFAULT_MAX, dynamic_shared};

    #[test]
    fn dynamic_shared_memory_comes_from_the_one_local_argument() {
        assert_eq!(dynamic_shared(&[KernelArg::U32(3)]).unwrap(), 0);
        let args = [KernelArg::U32(3), KernelArg::Local(4096)];
        assert_eq!(dynamic_shared(&args).unwrap(), 4096);
        assert_eq!(
            super::arg_size(&args[1]),
            4,
            "the kernel sees the size as an unsigned int"
        );
        assert!(dynamic_shared(&[KernelArg::Local(8), KernelArg::Local(8)]).is_err());
        assert!(dynamic_shared(&[KernelArg::Local(1 << 33)]).is_err());
        assert_eq!(SHARED_DEFAULT_MAX, 49152);
    }
}
