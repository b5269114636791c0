//! The preprocessing of the n-D `locate` on an OpenCL or CUDA device: [`prepare_on`] computes
//! what [`super::prep::prepare`] computes — trackpy's bandpass axis by axis, rescaled to the
//! integer gamut — with the 2-D pipeline's kernels (`detect/kernels/locate.cl`) laid over the
//! volume's axes. Each pass of a C-order volume along axis `a` is a pass over `outer` blocks of
//! `n × inner` values, which is what the 2-D kernels see as `nf` frames of `h × w` pixels
//! (`locate_lowpass_y`, `locate_box_cols`, `locate_box_int_y` along an outer axis; the last
//! axis as rows: `locate_lowpass_x`, and `locate_box_rows`, which also subtracts the
//! background from the lowpass, clips it and takes each row's maximum). Every value is a float64
//! sum in the CPU's order, rounded where the CPU rounds (float32 pixels' background in float,
//! integer pixels' in integers): the integer image and its scale are the CPU's bit for bit, and
//! the maxima, refinement and characterisation that follow on the host give the CPU's features.
//!
//! Devices without float64 are refused in words. The host's inverted pixels are uploaded as
//! float64 (8 bytes a voxel; the 2-D pipeline uploads frames as stored, a later step here).

use bridge_core::exec::{Buffer, Executor, Grid, TypedExecutor};
use bridge_core::{BridgeError, Device, Result};

use super::params::Resolved;
use super::{Kind, LocateNdParams, prep::split};
use crate::detect::gpu::{round_up_to, to_u32};
use crate::detect::kernels::locate_kernels::Kernels;
use crate::detect::kernels::{FRAME_WG, LOCATE_OPTS_F64};
use crate::detect::locate::bandpass::lowpass_half;

/// Work items per group along the first grid axis.
const WG: usize = 64;

/// Work items per group of the per-voxel launch.
const PIXEL_WG: usize = 256;

/// A pass along one axis of the volume, as the 2-D kernels see it: `nf` frames of `h × w`.
#[derive(Debug, Clone, Copy)]
struct Frames {
    h: u32,
    w: u32,
    nf: u32,
}

impl Frames {
    /// Along outer axis `axis` (`inner > 1`): `outer` frames of `n` rows of `inner`.
    fn outer(shape: &[usize], axis: usize) -> Result<Self> {
        let (outer, n, inner) = split(shape, axis);
        Frames {
            h: to_u32(n, "axis length")?,
            w: to_u32(inner, "voxels per step")?,
            nf: to_u32(outer, "lines")?,
        }
        .checked()
    }

    /// The kernels index in `int`: every extent below 2³¹.
    fn checked(self) -> Result<Self> {
        if [self.h, self.w, self.nf]
            .iter()
            .any(|&v| v > i32::MAX as u32)
        {
            return Err(BridgeError::invalid_argument(
                "image",
                format!(
                    "an extent of {} × {} × {} does not fit the device kernels' 32-bit signed \
                     indices; run locate on the CPU",
                    self.nf, self.h, self.w
                ),
            ));
        }
        Ok(self)
    }

    /// Along the last axis: rows of `shape[ndim − 1]` values, grouped as frames of the
    /// second-last axis.
    fn rows(shape: &[usize]) -> Result<Self> {
        let nd = shape.len();
        let w = shape[nd - 1];
        let h = if nd > 1 { shape[nd - 2] } else { 1 };
        let nf = shape[..nd.saturating_sub(2)].iter().product::<usize>();
        Frames {
            h: to_u32(h, "rows")?,
            w: to_u32(w, "row length")?,
            nf: to_u32(nf, "planes")?,
        }
        .checked()
    }

    /// One work item per value: `(x, y, frame)`.
    fn grid3(self) -> ([usize; 3], [usize; 3]) {
        (
            [
                round_up_to(self.w as usize, WG),
                self.h as usize,
                self.nf as usize,
            ],
            [WG, 1, 1],
        )
    }

    /// One work item per column of each frame: `(x, frame)`.
    fn columns(self) -> ([usize; 2], [usize; 2]) {
        (
            [round_up_to(self.w as usize, WG), self.nf as usize],
            [WG, 1],
        )
    }

    /// One work item per row of each frame: `(y, frame)`.
    fn lines(self) -> ([usize; 2], [usize; 2]) {
        (
            [round_up_to(self.h as usize, WG), self.nf as usize],
            [WG, 1],
        )
    }
}

/// CUDA's grid has at most 65 535 blocks along its y and z axes, where these launches put an
/// axis's length (`h`) and the number of lines or planes (`nf`): a volume or image beyond that
/// is refused in words (OpenCL has no such limit).
fn check_cuda_grid<E: Executor>(e: &E, shape: &[usize]) -> Result<()> {
    const MAX: usize = 65_535;
    if !matches!(e.device(), Device::Cuda(_)) {
        return Ok(());
    }
    let nd = shape.len();
    // grid y/z: every axis but the last as `h`; the outer product of each outer axis and the
    // planes before the last two as `nf`
    let too_big = shape[..nd - 1].iter().any(|&d| d > MAX)
        || (0..nd - 1).any(|a| shape[..a].iter().product::<usize>() > MAX)
        || shape[..nd.saturating_sub(2)].iter().product::<usize>() > MAX;
    if too_big {
        return Err(BridgeError::Unsupported(format!(
            "locate on an image of shape {shape:?} on {}: its kernels put an axis of more than \
             {MAX} along CUDA's grid y or z; run it on the CPU or on OpenCL",
            e.device()
        )));
    }
    Ok(())
}

/// [`super::prep::prepare`] with `preprocess` on executor `e`: the bandpass of `raw` (the
/// inverted pixels in f64, C order, shape `shape`) rescaled to the integer gamut, and the
/// factor of that rescaling — the CPU's bit for bit.
pub(super) fn prepare_on<E: Executor>(
    e: &E,
    raw: &[f64],
    shape: &[usize],
    kind: Kind,
    p: &LocateNdParams,
    res: &Resolved,
) -> Result<(Vec<u32>, f64)> {
    if !e.has_fp64() {
        return Err(BridgeError::Unsupported(format!(
            "locate on a volume needs float64 on the device ({} has none): its bandpass sums in \
             float64 as trackpy does; run it on the CPU",
            e.device()
        )));
    }
    let nd = shape.len();
    let nvox = raw.len();
    let plane = to_u32(nvox, "voxels")?;
    check_cuda_grid(e, shape)?;
    let k = Kernels::new(e, LOCATE_OPTS_F64);
    let int = matches!(kind, Kind::U8 | Kind::U16);
    let int_max = kind.int_max();
    let thr = p.threshold.unwrap_or(if int { 1.0 } else { 1.0 / 255.0 });
    let prm = e.upload_slice(&[thr, int_max, p.percentile / 100.0])?;
    let raw_d = e.upload_slice(raw)?;
    let mut tmp = e.alloc_elems::<f64>(nvox)?;

    // trackpy's lowpass: each axis in turn (zero padding), or the pixels as they are
    let mut low: Option<Buffer<E, f64>> = None;
    for (axis, &s) in res.noise.iter().enumerate() {
        let Some(half) = lowpass_half(s) else {
            continue;
        };
        let taps = e.upload_slice(&half)?;
        let r = to_u32(half.len() - 1, "lowpass radius")?;
        let dst = e.alloc_elems::<f64>(nvox)?;
        let src = low.as_ref().unwrap_or(&raw_d);
        if axis == nd - 1 {
            let f = Frames::rows(shape)?;
            let (g, l) = f.grid3();
            k.locate_lowpass_x(Grid::new(&g, &l), src, &dst, &taps, r, f.h, f.w, f.nf)?;
        } else {
            let f = Frames::outer(shape, axis)?;
            let (g, l) = f.grid3();
            k.locate_lowpass_y(Grid::new(&g, &l), src, &dst, &taps, r, f.h, f.w, f.nf)?;
        }
        low = Some(dst);
    }
    let low = low.as_ref().unwrap_or(&raw_d);

    // the boxcar background along the outer axes, each stored in the pixels' type
    let mode: u32 = match kind {
        Kind::U8 | Kind::U16 => 2,
        Kind::F32 => 1,
        Kind::F64 => 0,
    };
    let mut bg: Option<Buffer<E, f64>> = None;
    for (axis, &s) in res.smoothing.iter().enumerate().take(nd - 1) {
        if s <= 1 {
            continue;
        }
        let size = to_u32(s, "smoothing_size")?;
        let f = Frames::outer(shape, axis)?;
        let src = bg.as_ref().unwrap_or(&raw_d);
        if int {
            let (g, l) = f.grid3();
            k.locate_box_int_y(Grid::new(&g, &l), src, &tmp, f.h, f.w, f.nf, size)?;
        } else {
            let (g, l) = f.columns();
            k.locate_box_cols(Grid::new(&g, &l), src, &tmp, f.h, f.w, f.nf, size, mode)?;
        }
        // the pass's output becomes the background; its buffer the next scratch
        let next = match bg.take() {
            Some(old) => old,
            None => e.alloc_elems::<f64>(nvox)?,
        };
        bg = Some(std::mem::replace(&mut tmp, next));
    }
    drop(tmp);

    // along the last axis: its boxcar (or none), subtracted from the lowpass and clipped, and
    // every row's maximum
    let last = res.smoothing[nd - 1];
    let (size, row_mode) = if last <= 1 { (1, 3) } else { (last, mode) };
    let f = Frames::rows(shape)?;
    let rows = f.h as usize * f.nf as usize;
    let bp = e.alloc_elems::<f64>(nvox)?;
    let rowmax = e.alloc_elems::<f64>(rows)?;
    let src = bg.as_ref().unwrap_or(&raw_d);
    let (g, l) = f.lines();
    k.locate_box_rows(
        Grid::new(&g, &l),
        src,
        low,
        &bp,
        &rowmax,
        &prm,
        f.h,
        f.w,
        f.nf,
        to_u32(size, "smoothing_size")?,
        row_mode,
        1,
    )?;
    drop(bg);

    // the volume's rescale factor and the integer image (the histogram is the kernel's; the
    // host takes the percentile from the image as the CPU does)
    let scale = e.alloc_elems::<f64>(1)?;
    let rows_u = to_u32(rows, "rows")?;
    k.locate_scale(
        Grid::new(&[FRAME_WG], &[FRAME_WG]),
        &rowmax,
        &scale,
        &prm,
        rows_u,
        0,
    )?;
    let img = e.alloc_elems::<u32>(nvox)?;
    let nbins = int_max as usize + 1;
    let hist = e.zeroed_elems::<i32>(nbins)?;
    let (g, l) = ([round_up_to(nvox, PIXEL_WG), 1], [PIXEL_WG, 1]);
    let nbins_u = to_u32(nbins, "bins")?;
    k.locate_rescale(
        Grid::new(&g, &l),
        &bp,
        &scale,
        &prm,
        &img,
        &hist,
        plane,
        1,
        nbins_u,
        0,
    )?;
    let img = e.read_elems(&img, nvox)?;
    let scale = e.read_elems(&scale, 1)?;
    let scale = scale.first().copied().ok_or_else(|| {
        BridgeError::backend("locate", None, "the rescale factor was not read back")
    })?;
    Ok((img, scale))
}
