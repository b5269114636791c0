//! How frames reach the device: host frames grouped in runs of equal shape and pixel type
//! (floats converted on the host, raw integers packed in parallel and converted on the device),
//! or a device-resident movie read in place.

use bridge_core::exec::Executor;
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::super::FrameView;
use super::super::blob_log::{
    BlobLogParams, Converted, DevicePlan, Prescale, border_covers, check_range_of,
    check_scale_space_range, convert_frame,
};
use super::super::real::Real;
use super::super::trace_span;
use super::pipeline::{
    Certify, HostFrames, Input, Mode, Prescaling, RawFrames, RawPack, RunOut, Turn, run_typed,
};
use super::{GpuDetectConfig, Precision};

/// How a frame reaches the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Converted on the host, working type f32.
    HostF32,
    /// Converted on the host, working type f64.
    HostF64,
    /// Raw u8, converted on the device (working type f64); on the host where the device has
    /// no doubles and the certified search runs.
    RawU8,
    /// Raw u16, as [`Kind::RawU8`].
    RawU16,
}

fn kind_of(f: &FrameView<'_>) -> Kind {
    match f {
        FrameView::U8(_) => Kind::RawU8,
        FrameView::U16(_) => Kind::RawU16,
        FrameView::F32(_) => Kind::HostF32,
        FrameView::F64(_) => Kind::HostF64,
    }
}

/// `(mode, c, k)` of the device conversion of an integer frame, with the CPU's arithmetic
/// ([`convert_frame`]); the CPU's error for `MinMax` on a constant frame.
fn raw_params(f: &FrameView<'_>, prescale: Prescale) -> Result<(u32, f64, f64)> {
    let (lo, hi, dmax) = match f {
        FrameView::U8(a) => {
            let (lo, hi) = a
                .iter()
                .fold((u8::MAX, u8::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            (f64::from(lo), f64::from(hi), 255.0)
        }
        FrameView::U16(a) => {
            let (lo, hi) = a
                .iter()
                .fold((u16::MAX, u16::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            (f64::from(lo), f64::from(hi), 65535.0)
        }
        _ => {
            return Err(BridgeError::invalid_argument(
                "frame",
                "device prescale takes u8 or u16 frames",
            ));
        }
    };
    match prescale {
        Prescale::Legacy => Ok((0, 0.0, 1.0 / dmax)),
        Prescale::None => Ok((0, 0.0, 1.0)),
        Prescale::MinMax => {
            if lo < hi {
                Ok((1, lo, hi - lo))
            } else {
                // the CPU's error message
                match convert_frame(f, prescale) {
                    Err(e) => Err(e),
                    Ok(_) => Err(BridgeError::InvalidInput(
                        format!(
                            "prescale minmax needs min < max, but the frame is constant ({lo})"
                        )
                        .into(),
                    )),
                }
            }
        }
        Prescale::Range(c, d) => Ok((1, c, d - c)),
    }
}

/// Group into runs of equal shape and kind, run each on the device (one upload per run).
pub(super) fn run_frames<E: Executor>(
    e: &E,
    frames: &[FrameView<'_>],
    p: &BlobLogParams,
    cfg: &GpuDetectConfig,
    want_cube: bool,
    turn: &Turn,
) -> Result<RunOut> {
    p.validate()?;
    let f64_cube =
        cfg.precision != Precision::F32 && cfg.precision.doubles(e.has_fp64(), e.device())?;
    for (i, f) in frames.iter().enumerate() {
        // an error names its frame (counted in the batch; the caller shifts it to the movie's)
        (|| {
            f.validate()?;
            // float32 frames always get a float32 cube
            check_scale_space_range(f, p, !f64_cube || matches!(f, FrameView::F32(_)))
        })()
        .map_err(|e| e.of_frame(i, frames.len()))?;
    }
    let mut out = RunOut {
        blobs: Vec::with_capacity(frames.len()),
        cubes: want_cube.then(Vec::new),
        kernel_s: 0.0,
        certified: (0, 0),
    };
    // the certified search where the CPU's results are asked for (not the cube); it needs no
    // doubles on the device
    let certify = cfg.precision != Precision::F32 && !want_cube && certified_search(cfg);
    let plan = |f32_frames: bool, (h, w): (usize, usize)| {
        if !certify || border_covers(p.exclude_border, h, w) {
            return None;
        }
        let sigmas: Vec<f64> = if f32_frames {
            p.sigma_list::<f32>()
                .iter()
                .map(|&s| f64::from(s))
                .collect()
        } else {
            p.sigma_list::<f64>()
        };
        DevicePlan::new(&sigmas, p, f32_frames, (h, w))
    };
    let mut i = 0;
    while i < frames.len() {
        let dim = frames[i].dim();
        let kind = kind_of(&frames[i]);
        let mut j = i + 1;
        // CUDA grids: at most 65535 frames along y in the prescale launch
        while j < frames.len()
            && j - i < 65_535
            && frames[j].dim() == dim
            && kind_of(&frames[j]) == kind
        {
            j += 1;
        }
        let run = &frames[i..j];
        let (h, w) = dim;
        let n = run.len();
        let dims = (n, h, w);
        // the run converted on the host to f64 (working type), then on the device
        let host_f64 = |plan: Option<DevicePlan>| -> Result<RunOut> {
            let imgs: Vec<Vec<f64>> = run
                .par_iter()
                .map(|f| frame_f64(f, p.prescale))
                .collect::<Result<_>>()?;
            run_host(e, &imgs, dims, p, cfg, (want_cube, f64_cube, plan), turn)
        };
        // no doubles to convert raw integers on the device as the CPU does: the certified
        // search gets them converted on the host (its f32 image must be the exact pixels
        // rounded once)
        let raw_on_host = match kind {
            Kind::RawU8 | Kind::RawU16 if !e.has_fp64() => plan(false, dim),
            _ => None,
        };
        let res = match kind {
            Kind::HostF32 => {
                let imgs: Vec<Vec<f32>> = run
                    .par_iter()
                    .map(|f| {
                        Ok(match convert_frame(f, p.prescale)? {
                            Converted::F32(v) => v,
                            Converted::F64(v) => v.iter().map(|&x| x as f32).collect(),
                        })
                    })
                    .collect::<Result<_>>()?;
                let plan = plan(true, dim);
                run_host(e, &imgs, dims, p, cfg, (want_cube, f64_cube, plan), turn)?
            }
            Kind::HostF64 => host_f64(plan(false, dim))?,
            Kind::RawU8 | Kind::RawU16 if raw_on_host.is_some() => host_f64(raw_on_host)?,
            Kind::RawU8 | Kind::RawU16 => {
                let t_pack = std::time::Instant::now();
                let px = if kind == Kind::RawU8 { 1 } else { 2 };
                let fb = h * w * px;
                // per-frame prescale parameters and little-endian pixels, in parallel
                let pr: Vec<(u32, f64, f64)> = run
                    .par_iter()
                    .map(|f| raw_params(f, p.prescale))
                    .collect::<Result<_>>()?;
                let mode = pr.last().map_or(0, |r| r.0);
                let params: Vec<(f64, f64)> = pr.iter().map(|r| (r.1, r.2)).collect();
                // written straight into the upload's memory (page-locked on CUDA; elsewhere a
                // pooled buffer: a new one would fault in every page again, 64 frames of 512²
                // u16 are 33.5 MB), in parallel, when the run is staged
                let fill = |bytes: &mut [u8]| -> Result<()> {
                    let t = std::time::Instant::now();
                    bytes
                        .par_chunks_mut(fb.max(1))
                        .zip(run.par_iter())
                        .for_each(|(dst, f)| pack_ne(f, dst));
                    trace_span(t, std::time::Instant::now(), || {
                        format!("detect: pack {n} raw frames")
                    });
                    Ok(())
                };
                trace_span(t_pack, std::time::Instant::now(), || {
                    format!("detect: prescale parameters of {n} raw frames")
                });
                let pre = Prescaling { params, mode };
                let raw = RawPack {
                    bytes: n * fb,
                    u16: kind != Kind::RawU8,
                    fill: &fill,
                };
                let input = Input::Raw(raw, pre);
                let convert = |i: usize| -> Result<Vec<f64>> {
                    let f = run.get(i).ok_or_else(|| {
                        BridgeError::backend("detect", None, format!("no frame {i} in the run"))
                    })?;
                    frame_f64(f, p.prescale)
                };
                let res = if let Some(plan) = plan(false, dim) {
                    let cert = Certify {
                        plan,
                        frames: HostFrames::Convert(&convert),
                    };
                    run_typed::<E, f64, f32>(e, input, dims, p, cfg, Mode::Certified(cert), turn)
                } else if f64_cube {
                    run_typed::<E, f64, f64>(e, input, dims, p, cfg, Mode::Cube(want_cube), turn)
                } else {
                    run_typed::<E, f64, f32>(e, input, dims, p, cfg, Mode::Cube(want_cube), turn)
                };
                res?
            }
        };
        out.blobs.extend(res.blobs);
        out.kernel_s += res.kernel_s;
        out.certified.0 += res.certified.0;
        out.certified.1 += res.certified.1;
        if let (Some(all), Some(c)) = (out.cubes.as_mut(), res.cubes) {
            all.extend(c);
        }
        i = j;
    }
    Ok(out)
}

/// A frame in its working type held in f64, converted as the CPU converts it.
fn frame_f64(f: &FrameView<'_>, prescale: Prescale) -> Result<Vec<f64>> {
    Ok(match convert_frame(f, prescale)? {
        Converted::F64(v) => v,
        Converted::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
    })
}

/// A run of frames converted on the host (working type `T`) on the device: the certified
/// search where it has a `plan`, else the cube in the working type where the device computes
/// in float64 (`f64_cube`; f32 frames always get an f32 cube), else in float32.
fn run_host<E: Executor, T: Real>(
    e: &E,
    imgs: &[Vec<T>],
    dims: (usize, usize, usize),
    p: &BlobLogParams,
    cfg: &GpuDetectConfig,
    (want_cube, f64_cube, plan): (bool, bool, Option<DevicePlan>),
    turn: &Turn,
) -> Result<RunOut> {
    let input = Input::Host(imgs);
    match plan {
        Some(plan) => {
            let cert = Certify {
                plan,
                frames: HostFrames::Typed(imgs),
            };
            run_typed::<E, T, f32>(e, input, dims, p, cfg, Mode::Certified(cert), turn)
        }
        None if f64_cube && !T::IS_F32 => {
            run_typed::<E, T, f64>(e, input, dims, p, cfg, Mode::Cube(want_cube), turn)
        }
        None => run_typed::<E, T, f32>(e, input, dims, p, cfg, Mode::Cube(want_cube), turn),
    }
}

/// Whether the certified search runs (`ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED` of the
/// configuration's tuning; auto: on every device).
fn certified_search(cfg: &GpuDetectConfig) -> bool {
    cfg.tuning
        .usize_knob("ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED")
        .is_none_or(|v| v == 1)
}

/// A frame's pixels as their bytes in the host's order (the order of typed device buffers,
/// `TypedExecutor::upload_bytes`) into `dst` (exactly its size); u8 and u16 only.
fn pack_ne(f: &FrameView<'_>, dst: &mut [u8]) {
    match f {
        FrameView::U8(a) => match a.as_slice() {
            Some(s) => dst.copy_from_slice(s),
            None => dst.iter_mut().zip(a.iter()).for_each(|(d, &v)| *d = v),
        },
        FrameView::U16(a) => match a.as_slice() {
            // a C-order frame: one memcpy
            Some(s) => dst.copy_from_slice(bytemuck::cast_slice(s)),
            None => {
                for (d, &v) in dst.chunks_exact_mut(2).zip(a.iter()) {
                    d.copy_from_slice(&v.to_ne_bytes());
                }
            }
        },
        _ => {}
    }
}

/// `blob_log` on a movie that already lives on the executor's device: `raw` holds `t` frames
/// of `h × w` raw `u8` or `u16` pixels, C order, read in place (no upload). The prescale is applied on the device; [`Prescale::MinMax`] needs per-frame
/// extrema, which this path does not compute ([`BridgeError::Unsupported`]; the caller
/// converts the movie to the host instead).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_resident<E: Executor>(
    e: &E,
    raw: RawFrames<'_, E>,
    (t, h, w): (usize, usize, usize),
    p: &BlobLogParams,
    cfg: &GpuDetectConfig,
    turn: &Turn,
    mut progress: impl FnMut(usize),
) -> Result<RunOut> {
    p.validate()?;
    let dmax = match raw {
        RawFrames::U8(_) => 255.0,
        RawFrames::U16(_) => 65535.0,
    };
    let (mode, c, k) = match p.prescale {
        Prescale::Legacy => (0, 0.0, 1.0 / dmax),
        Prescale::None => (0, 0.0, 1.0),
        Prescale::Range(c, d) => (1, c, d - c),
        Prescale::MinMax => {
            return Err(BridgeError::Unsupported(
                "prescale minmax on a device-resident movie (it needs per-frame extrema)".into(),
            ));
        }
    };
    let f64_cube =
        cfg.precision != Precision::F32 && cfg.precision.doubles(e.has_fp64(), e.device())?;
    check_range_of(dmax, true, p, !f64_cube)?;
    let mut out = RunOut {
        blobs: Vec::with_capacity(t),
        cubes: None,
        kernel_s: 0.0,
        certified: (0, 0),
    };
    let mut frame0 = 0;
    while frame0 < t {
        // CUDA grids: at most 65535 frames along y in the prescale launch
        let n = (t - frame0).min(65_535);
        let pre = Prescaling {
            params: vec![(c, k); n],
            mode,
        };
        let input = Input::Device(raw, frame0, pre);
        let dims = (n, h, w);
        let res = if f64_cube {
            run_typed::<E, f64, f64>(e, input, dims, p, cfg, Mode::Cube(false), turn)?
        } else {
            run_typed::<E, f64, f32>(e, input, dims, p, cfg, Mode::Cube(false), turn)?
        };
        out.blobs.extend(res.blobs);
        out.kernel_s += res.kernel_s;
        frame0 += n;
        progress(frame0);
    }
    Ok(out)
}
