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

use std::fmt;

use algorithms::exec::{AnyExecutor, executor_for};
use bridge_core::{Array, Device, Result};

use crate::registry;

/// A device of the process registry, open: for `opencl:N` and `cuda:N` it holds the device's
/// one executor. Cheap to clone; two handles of one device share everything.
#[derive(Clone)]
pub struct DeviceHandle {
    device: Device,
    executor: Option<AnyExecutor>,
}

impl fmt::Debug for DeviceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceHandle")
            .field("device", &self.device)
            .field("executor", &self.executor.is_some())
            .finish()
    }
}

impl PartialEq for DeviceHandle {
    fn eq(&self, other: &Self) -> bool {
        self.device == other.device
    }
}

impl DeviceHandle {
    /// Which device (`cpu`, `opencl:0`, `cuda:1`, `torch:cpu`, …).
    pub fn device(&self) -> Device {
        self.device
    }

    /// The device's executor (`opencl:N`, `cuda:N`); `None` for the host and torch devices.
    pub fn executor(&self) -> Option<&AnyExecutor> {
        self.executor.as_ref()
    }
}

impl fmt::Display for DeviceHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.device.fmt(f)
    }
}

/// Open `spec` (`"cpu"`, `"opencl:0"`, `"cuda:0"`, `"torch:cpu"`, `"torch:cuda:0"`) on the
/// process registry: [`bridge_core::BridgeError::UnknownDevice`] or
/// [`bridge_core::BridgeError::BackendUnavailable`]
/// (saying why) when the registry has no such device, the executor's error when it cannot be
/// opened.
pub fn device(spec: &str) -> Result<DeviceHandle> {
    open_device(spec.parse()?)
}

/// [`device`] for a parsed [`Device`].
pub fn open_device(device: Device) -> Result<DeviceHandle> {
    registry().topology().check_device(device)?;
    let executor = match device {
        Device::OpenCl(_) | Device::Cuda(_) => Some(executor_for(device, "a device handle")?),
        Device::Cpu | Device::TorchCpu | Device::TorchCuda(_) => None,
    };
    Ok(DeviceHandle { device, executor })
}

/// Moving an [`Array`] to a device: `array.to(&dev)`.
pub trait ArrayTo: Sized {
    /// The array on `dev`, through the process registry's cheapest route (in place when it is
    /// already there; zero-copy, peer or staged otherwise, as the planner picks and the
    /// registry's observer records).
    fn to(self, dev: &DeviceHandle) -> Result<Array>;
}

impl ArrayTo for Array {
    fn to(self, dev: &DeviceHandle) -> Result<Array> {
        let d = dev.device();
        if self.device() == d {
            return Ok(self);
        }
        registry().convert(self, d.memory_type(), d)
    }
}
