//! The n-D scale space on an OpenCL or CUDA device: [`log_cube_nd_on`] computes the cube of
//! [`super::laplace::log_cube_nd`] with the same passes, in the same order, with the same
//! roundings (kernels `nd_pass` and `nd_scale` of `detect/kernels/blob_log.cl`): each output of
//! a pass is the centre tap then the mirrored pairs from the outermost inwards, summed in
//! float64 with contraction off, stored in the working type. The cube is therefore the CPU's
//! bit for bit, and the peak search and pruning that follow on the host give the CPU's rows.
//!
//! Devices without float64 are refused in words: their sums would round differently and the
//! rows would no longer be scikit-image's.
//!
//! Device memory: six volumes of the working type (the image, four work volumes, one plane of
//! the cube), whatever the number of scales; each plane is read back as soon as it is done.

use bridge_core::exec::{Buffer, DeviceElement, Executor, Grid, TypedExecutor};
use bridge_core::{BridgeError, Result};

use crate::detect::filters::LogKernels;
use crate::detect::gpu::to_u32;
use crate::detect::kernels::blob_log_kernels::Kernels;
use crate::detect::kernels::{OPTS_F32_ACC64, OPTS_F64};
use crate::detect::real::Real;

use super::laplace::Geo;

/// Work items per group of the 1-D launches.
const WG: usize = 256;

/// A pass's output: stored, or added to what the buffer holds.
#[derive(Clone, Copy)]
enum Emit {
    Store = 0,
    Add = 1,
}

/// The launches of one plane on one executor.
struct Passes<'a, E: Executor> {
    k: Kernels<'a, E>,
    dims: &'a [usize],
    n: u64,
    global: [usize; 1],
}

impl<E: Executor> Passes<'_, E> {
    /// One correlation pass along `axis` with the half kernel `half` (on the device).
    fn pass<T: DeviceElement>(
        &self,
        src: &Buffer<E, T>,
        dst: &Buffer<E, T>,
        axis: usize,
        half: &Buffer<E, f64>,
        emit: Emit,
    ) -> Result<()> {
        let g = Geo::of(self.dims, axis);
        let r = to_u32(half.len() - 1, "kernel radius")?;
        self.k.nd_pass(
            Grid::new(&self.global, &[WG]),
            src,
            dst,
            half,
            r,
            to_u32(g.len, "axis length")?,
            to_u32(g.inner, "voxels per step")?,
            self.n,
            emit as u32,
        )
    }
}

/// The taps of one scale on the device: `(g0, g2)` per axis.
type Taps<E> = Vec<(Buffer<E, f64>, Buffer<E, f64>)>;

/// [`super::laplace::log_cube_nd`] on executor `e`: the cube, plane-major, and its minimum and
/// maximum, equal to the CPU's bit for bit. `img` holds the image's values (exact `T` values)
/// in C order, shape `dims`.
pub(super) fn log_cube_nd_on<T, E>(
    e: &E,
    img: &[f64],
    dims: &[usize],
    sigmas: &[Vec<T>],
    scales: &[T],
) -> Result<(Vec<T>, T, T)>
where
    T: Real,
    E: Executor,
{
    if !e.has_fp64() {
        return Err(BridgeError::Unsupported(format!(
            "blob_log on an n-D image needs float64 on the device ({} has none): its passes \
             sum in float64 as SciPy does; run it on the CPU",
            e.device()
        )));
    }
    let opts = if T::IS_F32 { OPTS_F32_ACC64 } else { OPTS_F64 };
    let nvox: usize = dims.iter().product();
    let ndim = dims.len();
    let n = nvox as u64;
    let p = Passes {
        k: Kernels::new(e, opts),
        dims,
        n,
        global: [nvox.div_ceil(WG) * WG],
    };
    let image: Vec<T> = img.iter().map(|&v| T::from_f64(v)).collect();
    let image = e.upload_slice(&image)?;
    let work = if ndim > 1 { nvox } else { 0 };
    let mut q = e.alloc_elems::<T>(work.max(1))?;
    let mut qn = e.alloc_elems::<T>(work.max(1))?;
    let mut d1 = e.alloc_elems::<T>(work.max(1))?;
    let mut d2 = e.alloc_elems::<T>(work.max(1))?;
    let plane = e.alloc_elems::<T>(nvox)?;
    let mut cube: Vec<T> = Vec::with_capacity(nvox * sigmas.len());
    for (row, &scale) in sigmas.iter().zip(scales) {
        let taps: Taps<E> = row
            .iter()
            .map(|s| {
                let k = LogKernels::new(s.to_f64(), T::IS_F32);
                Ok((e.upload_slice(&k.g0)?, e.upload_slice(&k.g2)?))
            })
            .collect::<Result<_>>()?;
        // the passes of `laplace::log_plane_nd`, in its order
        let mut q_is_img = true;
        for a in 0..ndim {
            let emit = if a == 0 { Emit::Store } else { Emit::Add };
            let src = if q_is_img { &image } else { &q };
            if a == ndim - 1 {
                p.pass(src, &plane, a, &taps[a].1, emit)?;
                break;
            }
            p.pass(src, &d1, a, &taps[a].1, Emit::Store)?;
            for (b, t) in taps.iter().enumerate().take(ndim - 1).skip(a + 1) {
                p.pass(&d1, &d2, b, &t.0, Emit::Store)?;
                std::mem::swap(&mut d1, &mut d2);
            }
            p.pass(&d1, &plane, ndim - 1, &taps[ndim - 1].0, emit)?;
            let src = if q_is_img { &image } else { &q };
            p.pass(src, &qn, a, &taps[a].0, Emit::Store)?;
            std::mem::swap(&mut q, &mut qn);
            q_is_img = false;
        }
        p.k.nd_scale(Grid::new(&p.global, &[WG]), &plane, scale, n)?;
        cube.extend(e.read_elems(&plane, nvox)?);
    }
    let first = cube.first().copied().unwrap_or(T::ZERO);
    let (lo, hi) = cube.iter().fold((first, first), |(lo, hi), &v| {
        (if v < lo { v } else { lo }, if v > hi { v } else { hi })
    });
    Ok((cube, lo, hi))
}
