//! Live device handles: [`device`] opens a device of the process [`registry`](crate::registry)
//! and [`ArrayTo::to`] moves an array there through the registry's route planner.
//!
//! A [`DeviceHandle`] holds the device's one executor (its queue or stream, pools and compiled
//! programs, shared by every handle, back end and call of the process; see
//! `bridge_cuda::Gpu::executors_created`), so opening it checks that the device is present and
//! can run kernels, and every later use is a cheap clone. Algorithms take arrays and run where
//! their input lives (`algorithms::detect::blob_log(&movie, &params)`): the handle is how an
//! array gets there.
//!
//! ```
//! use arraybridge::algorithms::detect::{self, BlobLogParams};
//! use arraybridge::{Array, ArrayTo};
//! use ndarray::Array3;
//!
//! let m = Array3::<u16>::from_shape_fn((4, 64, 64), |(t, y, x)| {
//!     let d2 = (y as f64 - 20.0 - t as f64).powi(2) + (x as f64 - 30.0).powi(2);
//!     (500.0 + 20000.0 * (-d2 / 8.0).exp()) as u16
//! });
//! let dev = arraybridge::device("opencl:0").or_else(|_| arraybridge::device("cpu"))?;
//! let movie = Array::from_ndarray(m.into_dyn()).to(&dev)?;
//! let p = BlobLogParams { max_sigma: 3.0, num_sigma: 5, threshold: None,
//!                         threshold_rel: Some(0.2), ..Default::default() };
//! let blobs = detect::blob_log(&movie, &p)?; // on the device the movie lives on
//! assert_eq!(blobs.len(), 4);
//! # Ok::<(), arraybridge::BridgeError>(())
//! ```

use std::sync::Arc;

use algorithms::exec::AnyExecutor;
pub use algorithms::exec::DeviceHandle;
use bridge_core::convert::Registry;
use bridge_core::{Array, BridgeError, Device, Result};

use crate::registry;

/// Open `spec` (`"cpu"`, `"opencl:0"`, `"cuda:0"`, `"torch:cpu"`, `"torch:cuda:0"`) on the
/// process registry: [`bridge_core::BridgeError::UnknownDevice`] or
/// [`bridge_core::BridgeError::BackendUnavailable`]
/// (saying why) when the registry has no such device, the executor's error when it cannot be
/// opened.
pub fn device(spec: &str) -> Result<DeviceHandle> {
    open_device(spec.parse()?)
}

/// [`device`] for a parsed [`Device`]: the one place of the library that turns a device's name
/// into its live executor (the algorithms take handles, or the device an array lives on).
pub fn open_device(device: Device) -> Result<DeviceHandle> {
    crate::backends::process_registry().open_device(device)
}

/// Opening devices on a shared [`Registry`]: the registry owns its backends, and with them each
/// device's one executor (queue or stream, pools, compiled programs). The free functions
/// [`device`] and [`open_device`] are these on the process [`registry`]; a test or an embedding
/// program can build a registry of its own ([`crate::build_registry`]) and open its devices.
/// A handle keeps its registry: [`ArrayTo::to`] converts through it, in its backends'
/// contexts.
///
/// ```
/// use arraybridge::{Devices, build_registry};
///
/// let reg = build_registry(); // its own backends: contexts, pools, programs
/// let cpu = reg.device("cpu")?;
/// assert_eq!(cpu.device(), arraybridge::Device::Cpu);
/// assert!(reg.device("opencl:99").is_err()); // no such device: an error, never a panic
/// # Ok::<(), arraybridge::BridgeError>(())
/// ```
pub trait Devices {
    /// Open `spec` (`"cpu"`, `"opencl:0"`, `"cuda:0"`, `"torch:cpu"`, `"torch:cuda:0"`).
    fn device(&self, spec: &str) -> Result<DeviceHandle>;
    /// [`Devices::device`] for a parsed [`Device`].
    fn open_device(&self, device: Device) -> Result<DeviceHandle>;
}

impl Devices for Arc<Registry> {
    fn device(&self, spec: &str) -> Result<DeviceHandle> {
        self.open_device(spec.parse()?)
    }

    fn open_device(&self, device: Device) -> Result<DeviceHandle> {
        self.topology().check_device(device)?;
        let handle = match device {
            Device::OpenCl(_) | Device::Cuda(_) => {
                DeviceHandle::from_executor(executor_of(self, device)?)
            }
            Device::Cpu | Device::TorchCpu | Device::TorchCuda(_) => {
                DeviceHandle::without_executor(device)?
            }
        };
        Ok(handle.with_registry(Arc::clone(self)))
    }
}

/// The registry that moves arrays to `dev`: the one it was opened on, else the process one.
fn registry_of(dev: &DeviceHandle) -> &Registry {
    match dev.registry() {
        Some(r) => r,
        None => registry(),
    }
}

/// The executor of `opencl:N` (on the OpenCL backend instance `reg` holds) or `cuda:N` (on the
/// device's primary context, which the CUDA driver keeps once per process: `bridge_cuda::gpu`
/// mirrors it, so that a device's pool and its memory limit are one, whichever registry asks);
/// [`BridgeError::BackendUnavailable`] when its backend is not compiled in or has no such
/// device.
#[cfg_attr(not(feature = "opencl"), allow(unused_variables))]
fn executor_of(reg: &Registry, device: Device) -> Result<AnyExecutor> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => Ok(AnyExecutor::Cuda(algorithms::exec::CudaExecutor::new(n)?)),
        #[cfg(feature = "opencl")]
        Device::OpenCl(_) => {
            let cl = reg
                .backend_of::<bridge_opencl::OpenClBackend>()
                .ok_or_else(|| {
                    BridgeError::unavailable(
                        "opencl",
                        format!("the registry has no OpenCL back end for {device}"),
                    )
                })?;
            Ok(AnyExecutor::OpenCl(algorithms::exec::OpenClExecutor::new(
                cl, device,
            )?))
        }
        _ => Err(BridgeError::unavailable(
            device.memory_type().to_string(),
            format!(
                "{device} has no back end in this build (build with the `{}` feature); use \
                 --device cpu",
                device.memory_type()
            ),
        )),
    }
}

/// Moving an [`Array`] to a device: `array.to(&dev)`.
pub trait ArrayTo: Sized {
    /// The array on `dev`, through the cheapest route of the registry `dev` was opened on (in
    /// place when it is already there; zero-copy, peer or staged otherwise, as the planner
    /// picks and the registry's observer records).
    fn to(self, dev: &DeviceHandle) -> Result<Array>;

    /// A copy of the array on `dev`, leaving this one where it is: the planned route of `dev`'s
    /// registry with its first hop copying from the borrowed array
    /// ([`Registry::copy`]; on the array's own device a copy there).
    fn copy_to(&self, dev: &DeviceHandle) -> Result<Array>;
}

impl ArrayTo for Array {
    fn to(self, dev: &DeviceHandle) -> Result<Array> {
        let d = dev.device();
        if self.device() == d {
            return Ok(self);
        }
        registry_of(dev).convert(self, d.memory_type(), d)
    }

    fn copy_to(&self, dev: &DeviceHandle) -> Result<Array> {
        let d = dev.device();
        registry_of(dev).copy(self, d.memory_type(), d)
    }
}
