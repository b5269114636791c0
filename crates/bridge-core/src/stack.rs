//! Stacking 2-D slices into one 3-D array (and back), so a batch of frames crosses to a device
//! in one conversion instead of one per frame.
//!
//! ```
//! use bridge_core::stack::{stack, unstack};
//! use bridge_core::Array;
//! use ndarray::Array2;
//! let frames: Vec<Array> = (0..3)
//!     .map(|i| Array::from_ndarray(Array2::<u16>::from_elem((4, 5), i).into_dyn()))
//!     .collect();
//! let cube = stack(&frames)?;
//! assert_eq!(cube.shape(), &[3, 4, 5]);
//! let back = unstack(&cube)?;
//! assert_eq!(back.len(), 3);
//! assert_eq!(back[2].as_ndarray::<u16>()?[[0, 0]], 2);
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```

use ndarray::{Array3, ArrayView2, ArrayViewD, Axis, Ix2};

use crate::array::{Array, HostData, HostElement};
use crate::convert::Registry;
use crate::device::{Device, MemoryType};
use crate::error::{BridgeError, Result};
use crate::with_host_data;

/// Stack typed 2-D views into a `(n, rows, cols)` array. Errors when empty or shapes differ.
pub fn stack_views<T: HostElement>(slices: &[ArrayView2<'_, T>]) -> Result<Array3<T>> {
    let first = slices
        .first()
        .ok_or_else(|| BridgeError::InvalidInput("cannot stack zero slices".into()))?;
    let (r, c) = first.dim();
    for (i, s) in slices.iter().enumerate() {
        if s.dim() != (r, c) {
            return Err(BridgeError::shape_mismatch(
                format!("{r}x{c}"),
                format!("{}x{}", s.nrows(), s.ncols()),
                format!("stack, slice {i}"),
            ));
        }
    }
    let mut out = Array3::<T>::default((slices.len(), r, c));
    for (mut dst, src) in out.outer_iter_mut().zip(slices) {
        dst.assign(src);
    }
    Ok(out)
}

fn as_2d<'a, T>(v: ArrayViewD<'a, T>, i: usize) -> Result<ArrayView2<'a, T>> {
    let nd = v.ndim();
    v.into_dimensionality::<Ix2>().map_err(|_| {
        BridgeError::shape_mismatch(
            "a 2-D slice",
            format!("{nd}-D"),
            format!("stack, slice {i}"),
        )
    })
}

/// Stack host 2-D arrays of one dtype into a 3-D host array.
pub fn stack(slices: &[Array]) -> Result<Array> {
    let first = slices
        .first()
        .ok_or_else(|| BridgeError::InvalidInput("cannot stack zero slices".into()))?;
    let dtype = first.dtype();
    for (i, s) in slices.iter().enumerate() {
        if s.dtype() != dtype {
            return Err(BridgeError::DTypeMismatch {
                expected: dtype,
                found: s.dtype(),
                context: format!("stack, slice {i}").into(),
            });
        }
        if s.memory_type() != MemoryType::Host {
            return Err(BridgeError::Unsupported(format!(
                "stack: slice {i} is {} memory on {}; stack host slices, then convert once",
                s.memory_type(),
                s.device()
            )));
        }
    }
    let hosts: Vec<&HostData> = slices.iter().map(|s| s.host()).collect::<Result<_>>()?;
    fn typed<T: HostElement>(hosts: &[&HostData]) -> Result<Array> {
        let views: Vec<ArrayView2<'_, T>> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let a = T::peek(h)
                    .ok_or_else(|| BridgeError::Unsupported("dtype tag mismatch".into()))?;
                as_2d(a.view(), i)
            })
            .collect::<Result<_>>()?;
        Ok(Array::from_ndarray(stack_views(&views)?.into_dyn()))
    }
    crate::dispatch_dtype!(dtype, T => typed::<T>(&hosts))
}

/// Stack host slices and convert the batch to `dst` on `dst_device` in ONE conversion.
pub fn stack_to(
    registry: &Registry,
    slices: &[Array],
    dst: MemoryType,
    dst_device: Device,
) -> Result<Array> {
    // Validate the destination before doing the stacking work.
    registry.plan(MemoryType::Host, Device::Cpu, dst, dst_device)?;
    registry.convert(stack(slices)?, dst, dst_device)
}

/// Split a host 3-D array into its 2-D slices along the first axis (copies).
pub fn unstack(array: &Array) -> Result<Vec<Array>> {
    if array.ndim() != 3 {
        return Err(BridgeError::shape_mismatch(
            "a 3-D array",
            format!("{}-D {:?}", array.ndim(), array.shape()),
            "unstack",
        ));
    }
    let h = array.host()?;
    Ok(with_host_data!(h, a => a
        .axis_iter(Axis(0))
        .map(|s| Array::from_ndarray(s.to_owned()))
        .collect()))
}
