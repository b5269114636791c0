//! Runtime-compiled kernels: the OpenCL side of the portable kernel contract
//! ([`bridge_core::kernel`]), a program cache, and a small launch API.
//!
//! ```no_run
//! use bridge_core::Device;
//! use bridge_opencl::{OpenClBackend, kernels};
//! # fn main() -> bridge_core::Result<()> {
//! let cl = OpenClBackend::new();
//! let dev = Device::OpenCl(0);
//! let x = cl.upload_slice(dev, &[1.0f32, 2.0, 3.0])?;
//! let y = cl.upload_slice(dev, &[10.0f32, 20.0, 30.0])?;
//! let program = cl.program_from(dev, &kernels::SAXPY, &[])?;
//! let mut k = program.kernel("saxpy")?;
//! k.arg_scalar(0, 3u32)?.arg_scalar(1, 2.0f32)?.arg_buffer(2, &x)?.arg_buffer(3, &y)?;
//! k.launch(&[bridge_opencl::round_up(3, 64)], Some(&[64]))?;
//! assert_eq!(y.read_vec::<f32>()?, vec![12.0, 24.0, 36.0]);
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use bridge_core::kernel::source_hash;
use bridge_core::{BridgeError, Device, Result, bf16, f16};
use opencl3::error_codes::CL_BUILD_PROGRAM_FAILURE;
use opencl3::kernel::Kernel;
use opencl3::program::Program;

use crate::buffer::{ClBuffer, Pending};
use crate::error::cl_error;
use crate::raw;
use crate::state::DeviceState;

/// The OpenCL preamble implementing the portable kernel vocabulary of
/// [`bridge_core::kernel`]; prepended to every program source.
///
/// `HAS_FP64` is defined only where the device has doubles (the extension is enabled then);
/// `HAS_FP16` likewise for `cl_khr_fp16` (an addition beyond the table, harmless for CUDA
/// sources that do not test it).
pub const PREAMBLE: &str = r#"/* arraybridge portable kernel preamble: OpenCL */
#define KERNEL __kernel void
#define GLOBAL __global
#define LOCAL __local
#define LOCAL_PTR __local
#define LOCAL_ARG(T, name) __local T* name
#define DYN_LOCAL(T, name) (void)0
#define DEVICE_FN inline
#define RESTRICT restrict
#define GID(d) get_global_id(d)
#define LID(d) get_local_id(d)
#define GROUP_ID(d) get_group_id(d)
#define LOCAL_SIZE(d) get_local_size(d)
#define NUM_GROUPS(d) get_num_groups(d)
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define ATOMIC_ADD_INT(p, v) atomic_add((p), (v))
#if defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define HAS_FP64 1
#elif defined(__opencl_c_fp64)
#define HAS_FP64 1
#endif
#if defined(cl_khr_fp16)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define HAS_FP16 1
#endif
"#;

/// Round `n` up to a multiple of `multiple` (for global sizes; kernels guard with
/// `if (GID(0) >= n) return;`). `multiple` of 0 returns `n`.
pub fn round_up(n: usize, multiple: usize) -> usize {
    if multiple == 0 {
        n
    } else {
        n.div_ceil(multiple).saturating_mul(multiple)
    }
}

/// Per-device cache of built programs, keyed by (source hash, options). The backend keeps one
/// per device it has built programs for.
#[derive(Default)]
pub(crate) struct ProgramCache {
    map: Mutex<HashMap<(u64, String), Arc<ClProgram>>>,
}

/// A program built for one device. Cheap to share (`Arc`); create a [`ClKernel`] per launch
/// site (kernels hold argument state and are not `Sync`).
pub struct ClProgram {
    program: Program,
    state: Arc<DeviceState>,
    name: String,
    options: String,
    hash: u64,
}

impl fmt::Debug for ClProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClProgram")
            .field("name", &self.name)
            .field("device", &self.state.device())
            .field("options", &self.options)
            .field("hash", &format_args!("{:016x}", self.hash))
            .finish()
    }
}

impl ClProgram {
    /// The program for `state`'s device from `cache`, built (and cached) on a miss.
    pub(crate) fn build_cached(
        state: &Arc<DeviceState>,
        cache: &ProgramCache,
        name: &str,
        source: &str,
        options: &[&str],
    ) -> Result<Arc<ClProgram>> {
        let hash = source_hash(source, options);
        let opts = options.join(" ");
        let key = (hash, opts.clone());
        let mut map = cache.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = map.get(&key) {
            return Ok(Arc::clone(p));
        }
        let device = state.device();
        let started = std::time::Instant::now();
        let full = format!("{PREAMBLE}#line 1\n{source}\n");
        let mut program = Program::create_from_source(&state.context, &full)
            .map_err(|e| cl_error(device, "clCreateProgramWithSource", e.0, 0))?;
        let id = state.entry.id.id();
        if let Err(e) = program.build(&[id], &opts) {
            let log = program.get_build_log(id).unwrap_or_default();
            return Err(
                if e.0 == CL_BUILD_PROGRAM_FAILURE || !log.trim().is_empty() {
                    BridgeError::KernelCompile {
                        kernel: name.to_owned(),
                        device,
                        log: format!("build options: {opts:?}\n{}", log.trim_end()),
                    }
                } else {
                    cl_error(device, "clBuildProgram", e.0, 0)
                },
            );
        }
        log::debug!(
            "opencl: built program {name} for {device} ({opts:?}) in {:.0} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        let p = Arc::new(ClProgram {
            program,
            state: Arc::clone(state),
            name: name.to_owned(),
            options: opts,
            hash,
        });
        map.insert(key, Arc::clone(&p));
        Ok(p)
    }

    /// Program name (as given when building).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device it was built for.
    pub fn device(&self) -> Device {
        self.state.device()
    }

    /// The build options.
    pub fn options(&self) -> &str {
        &self.options
    }

    /// The cache key's source hash ([`bridge_core::kernel::source_hash`]).
    pub fn source_hash(&self) -> u64 {
        self.hash
    }

    /// A fresh kernel object for entry point `entry`.
    pub fn kernel(&self, entry: &str) -> Result<ClKernel> {
        if entry.contains('\0') {
            return Err(BridgeError::invalid_argument(
                "entry",
                "kernel names cannot contain NUL",
            ));
        }
        let kernel = Kernel::create(&self.program, entry).map_err(|e| {
            BridgeError::invalid_argument(
                "entry",
                format!("program {} has no kernel {entry:?} ({e})", self.name),
            )
        })?;
        Ok(ClKernel {
            kernel,
            state: Arc::clone(&self.state),
            name: entry.to_owned(),
            buffers: BTreeMap::new(),
        })
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Scalar types that can be passed by value to a kernel (the matching OpenCL C types are
/// `uchar, ushort, uint, int, ulong, long, float, double, half`; bf16 is passed as `ushort`).
pub trait KernelScalar: bytemuck::Pod + sealed::Sealed {}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl KernelScalar for $t {}
    )*};
}
scalar!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, f16, bf16);

/// One kernel with its arguments. Set every argument, then [`launch`](Self::launch) (blocking)
/// or [`enqueue`](Self::enqueue) (returns a [`Pending`] token). Arguments persist between
/// launches, so only changed ones need setting again.
///
/// Launching is memory-safe on the host side (buffers are checked to belong to the kernel's
/// device and are kept alive until the launch completes), but what a kernel does with its
/// buffers is up to its source: index guards (`if (GID(0) >= n) return;`) are the kernel
/// author's responsibility. On CPU devices such as PoCL an out-of-bounds kernel access touches
/// host memory.
pub struct ClKernel {
    kernel: Kernel,
    state: Arc<DeviceState>,
    name: String,
    buffers: BTreeMap<u32, ClBuffer>,
}

impl fmt::Debug for ClKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClKernel")
            .field("name", &self.name)
            .field("device", &self.state.device())
            .finish()
    }
}

impl ClKernel {
    fn arg_err(&self, index: u32, code: i32) -> BridgeError {
        BridgeError::invalid_argument(
            format!("{} argument {index}", self.name),
            format!(
                "clSetKernelArg failed: {}",
                opencl3::error_codes::error_text(code)
            ),
        )
    }

    /// The entry point name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bind a buffer (a `GLOBAL T*` parameter). The buffer must be on the kernel's device.
    pub fn arg_buffer(&mut self, index: u32, buffer: &ClBuffer) -> Result<&mut Self> {
        if !Arc::ptr_eq(&buffer.state, &self.state) {
            return Err(BridgeError::invalid_argument(
                format!("{} argument {index}", self.name),
                format!(
                    "the buffer is on {}, the kernel on {}",
                    buffer.device(),
                    self.state.device()
                ),
            ));
        }
        raw::set_arg_mem(&self.kernel, index, buffer.as_raw())
            .map_err(|c| self.arg_err(index, c))?;
        self.buffers.insert(index, buffer.clone());
        Ok(self)
    }

    /// Bind a scalar by value; its size must match the parameter's.
    pub fn arg_scalar<T: KernelScalar>(&mut self, index: u32, value: T) -> Result<&mut Self> {
        raw::set_arg_scalar(&self.kernel, index, &value).map_err(|c| self.arg_err(index, c))?;
        self.buffers.remove(&index);
        Ok(self)
    }

    /// Size a `LOCAL_PTR` parameter (OpenCL only; CUDA kernels declare `LOCAL` arrays inside).
    pub fn arg_local(&mut self, index: u32, bytes: usize) -> Result<&mut Self> {
        raw::set_arg_local(&self.kernel, index, bytes).map_err(|c| self.arg_err(index, c))?;
        self.buffers.remove(&index);
        Ok(self)
    }

    fn check_sizes(&self, global: &[usize], local: Option<&[usize]>) -> Result<()> {
        if global.is_empty() || global.len() > 3 {
            return Err(BridgeError::invalid_argument(
                "global size",
                format!("1 to 3 dimensions expected, got {}", global.len()),
            ));
        }
        if let Some(l) = local
            && l.len() != global.len()
        {
            return Err(BridgeError::invalid_argument(
                "local size",
                format!(
                    "{} dimensions for a {}-dimensional global size",
                    l.len(),
                    global.len()
                ),
            ));
        }
        Ok(())
    }

    /// Enqueue a launch over `global` work items (total per dimension, 1 to 3 dimensions) in
    /// work groups of `local` (or the driver's choice). Returns a token to wait on; the bound
    /// buffers stay alive until it completes.
    pub fn enqueue(&mut self, global: &[usize], local: Option<&[usize]>) -> Result<Pending<()>> {
        self.check_sizes(global, local)?;
        let device = self.state.device();
        if global.contains(&0) {
            // Nothing to run; OpenCL rejects empty ranges.
            return Ok(Pending::new(
                raw::InFlight::done(Vec::new()),
                None,
                device,
                |_| Ok(()),
            ));
        }
        let ev = raw::launch(&self.state.queue, &self.kernel, global, local).map_err(|c| {
            cl_error(
                device,
                &format!("clEnqueueNDRangeKernel({})", self.name),
                c,
                0,
            )
        })?;
        raw::flush(&self.state.queue).map_err(|c| cl_error(device, "clFlush", c, 0))?;
        Ok(
            Pending::new(raw::InFlight::from_event(ev), None, device, |_| Ok(()))
                .keeping(self.buffers.values().cloned().collect()),
        )
    }

    /// Launch and wait for completion.
    pub fn launch(&mut self, global: &[usize], local: Option<&[usize]>) -> Result<()> {
        self.enqueue(global, local)?.wait()
    }

    /// Unbind every buffer argument (so that a cached kernel does not keep buffers alive).
    pub(crate) fn clear_buffers(&mut self) {
        self.buffers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preamble_defines_the_whole_contract() {
        let missing = bridge_core::kernel::missing_portable_macros(PREAMBLE);
        assert!(missing.is_empty(), "missing: {missing:?}");
    }

    #[test]
    fn round_up_works() {
        assert_eq!(round_up(0, 64), 0);
        assert_eq!(round_up(1, 64), 64);
        assert_eq!(round_up(64, 64), 64);
        assert_eq!(round_up(65, 64), 128);
        assert_eq!(round_up(5, 0), 5);
    }
}
