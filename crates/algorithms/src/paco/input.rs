//! PACO on inputs given as [`bridge_core::Array`]s on any memory type, run where the cube lives
//! (the CPU for host and torch memory, the cube's own `opencl:N`/`cuda:N` device otherwise):
//! each input is read in place when it is a host `f64` array or a `torch:cpu` `f64` tensor (a
//! view of the tensor's memory, no conversion), and otherwise converted through the
//! [`Registry`] to the host once (device arrays: one download, recorded by the registry's
//! observer; other float types: one cast to `f64`): PACO checks and scales the cube and builds
//! its per-pixel inputs on the host. A device run then uploads the cube once in its working
//! type, as [`super::paco_on_device`] does.

use bridge_core::convert::Registry;
use bridge_core::{Array, BridgeError, CastMode, DType, Device, MemoryType, Result};
use ndarray::{ArrayView1, ArrayView2, ArrayViewD, Ix1, Ix2, Ix3};

use super::settings::PacoParams;
use super::{PacoMaps, paco_on_device};
use crate::exec::DeviceHandle;

/// [`super::paco`] on `cube` `(T, H, W)`, `angles` `(T,)` and `psf` `(h, w)`, each an [`Array`] on
/// any memory type, run on the device the cube lives on (`opencl:N`, `cuda:N`; the CPU for
/// host and torch memory): the CPU's maps, bit for bit where the device has doubles. Host `f64`
/// arrays and `torch:cpu` `f64` tensors are read in place (no conversion); anything else is
/// converted through `reg` to the host once (device arrays: one download; other types: one
/// cast to `f64`). The inputs come back with the maps (host `f64` arrays where a conversion
/// happened).
pub fn paco_array(
    reg: &Registry,
    cube: Array,
    angles: Array,
    psf: Array,
    params: &PacoParams,
) -> Result<(PacoMaps, [Array; 3])> {
    let run_on = match cube.memory_type() {
        MemoryType::OpenCl | MemoryType::Cuda => DeviceHandle::of_array(&cube)?,
        MemoryType::Host | MemoryType::Torch => DeviceHandle::cpu(),
    };
    let cube = readable(reg, cube, "cube")?;
    let angles = readable(reg, angles, "angles")?;
    let psf = readable(reg, psf, "psf")?;
    let maps = with_view(&cube, |c| {
        let c = dims::<Ix3>(c, "cube", "(T, H, W)")?;
        with_view(&angles, |a| {
            let a: ArrayView1<'_, f64> = dims::<Ix1>(a, "angles", "(T,)")?;
            with_view(&psf, |p| {
                let p: ArrayView2<'_, f64> = dims::<Ix2>(p, "psf", "(h, w)")?;
                paco_on_device(&run_on, c, a, p, params)
            })
        })
    })?;
    Ok((maps, [cube, angles, psf]))
}

/// An `f64` input readable in place: host `f64` arrays and `torch:cpu` `f64` tensors as they
/// are, anything else converted to the host (once) and cast to `f64` (once).
fn readable(reg: &Registry, a: Array, what: &str) -> Result<Array> {
    if a.dtype() == DType::F64 && matches!(a.device(), Device::Cpu | Device::TorchCpu) {
        #[cfg(feature = "torch")]
        if a.device() == Device::TorchCpu && a.storage::<bridge_torch::TorchStorage>().is_some() {
            return Ok(a);
        }
        if a.memory_type() == MemoryType::Host {
            return Ok(a);
        }
    }
    let host = if a.memory_type() == MemoryType::Host {
        a
    } else {
        reg.convert(a, MemoryType::Host, Device::Cpu)?
    };
    match host.dtype() {
        DType::F64 => Ok(host),
        DType::F32
        | DType::F16
        | DType::BF16
        | DType::U8
        | DType::U16
        | DType::I32
        | DType::I64 => host.cast(DType::F64, CastMode::Lossless).map_err(|e| {
            BridgeError::InvalidInput(format!("PACO {what}: cannot be read as f64: {e}").into())
        }),
    }
}

/// Call `f` with an `f64` view of `a` (a host array, or a `torch:cpu` tensor's memory).
fn with_view<R>(a: &Array, f: impl FnOnce(ArrayViewD<'_, f64>) -> Result<R>) -> Result<R> {
    #[cfg(feature = "torch")]
    if let Some(st) = a.storage::<bridge_torch::TorchStorage>() {
        let t = st.tensor();
        return f(bridge_torch::tensor_view::<f64>(&t)?);
    }
    f(a.as_ndarray::<f64>()?)
}

/// The view with its expected number of dimensions (size-1 axes of angles and PSF squeezed).
fn dims<'a, D: ndarray::Dimension>(
    v: ArrayViewD<'a, f64>,
    what: &str,
    shape: &str,
) -> Result<ndarray::ArrayView<'a, f64, D>> {
    let found = format!("{:?}", v.shape());
    let want = D::NDIM.unwrap_or(v.ndim());
    let v = if v.ndim() > want {
        // (T, 1) angles, (1, h, w) PSFs: drop unit axes.
        let mut v = v;
        while v.ndim() > want {
            match v.shape().iter().position(|&n| n == 1) {
                Some(ax) => v = v.index_axis_move(ndarray::Axis(ax), 0),
                None => break,
            }
        }
        v
    } else {
        v
    };
    v.into_dimensionality::<D>()
        .map_err(|_| BridgeError::shape_mismatch(shape, found, format!("PACO {what}")))
}
