//! Volumes: a z-stack (a TIFF whose ImageJ or OME axes declare slices, a 4-D `.npy`, or any
//! input with `--axes zyx|tzyx`) is detected one volume at a time in 3-D, with scikit-image's
//! n-dimensional `blob_log` (`algorithms::detect::blob_log::blob_log_nd_on_device`, the
//! library's; the Python package's `ab.blob_log` of the same volume gives the same rows) or,
//! with `--method locate`, trackpy's 3-D `locate` (`algorithms::detect::locate::
//! locate_nd_on_device`; `--diameter`, `--separation`, `--noise-size`, `--smoothing-size` one
//! value or one per axis). Volumes run on the CPU (`auto`) or on the one device `--device`
//! names (the scale space, or locate's bandpass, there, in float64 with the CPU's arithmetic:
//! the same rows). Rows: `frame,z,y,x,sigma`, or `frame,z,y,x,sigma_z,sigma_y,sigma_x` with a
//! σ per axis; for locate `frame` then trackpy's columns (`z,y,x,mass,size,ecc,signal,
//! raw_mass,ep`, with `size_*`/`ep_*` per axis for anisotropic sizes; `ecc` is NaN in 3-D, as
//! trackpy's). The planes are read one volume at a time (the next read while this one is
//! detected), so memory is bounded by two volumes whatever the number of time points.

use std::path::Path;
use std::time::Instant;

use algorithms::detect::Movie;
use algorithms::detect::blob_log::{
    BlobLogNdParams, Border, Sigma, VolumeView, blob_log_nd_on_device,
};
use algorithms::detect::locate::{LocateNdParams, locate_nd_on_device};
use arraybridge::io::axes::stack_axes;
use arraybridge::io::csv::create_writer;
use arraybridge::io::npy::NpyFrames;
use arraybridge::io::stream::MovieStream;
use arraybridge::runtime::{ReadAhead, pieces};
use bridge_core::{BridgeError, Device, Result};

use super::super::device::{Choice, DeviceArg};
use super::args::{Args, Axes, Method, SigmaArg};
use super::multi::Runner;
use super::stream::Done;
use super::{Job, Where};

/// How the planes of an input make volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Planes {
    /// `Z` planes a volume, volume after volume.
    Each(usize),
    /// The whole file is one volume.
    Whole,
}

/// The volumes of `input` under `--axes` (`None`: a movie of 2-D frames).
pub(super) fn planes_of(args: &Args, input: &Path) -> Result<Option<Planes>> {
    let name = input.display().to_string();
    // a folder of frames declares no axes, whatever its name (`run.tif/`)
    let ext = if input.is_dir() {
        String::new()
    } else {
        input
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default()
    };
    let declared = || -> Result<Option<usize>> {
        match ext.as_str() {
            "tif" | "tiff" => Ok(stack_axes(input)?
                .filter(|a| a.is_volumes())
                .and_then(|a| usize::try_from(a.slices).ok())),
            "npy" => {
                let f = NpyFrames::open_planes(input)?;
                Ok((f.shape().len() == 4).then(|| f.shape()[1]))
            }
            _ => Ok(None),
        }
    };
    match args.axes {
        Axes::Tyx => Ok(None),
        Axes::Zyx => Ok(Some(Planes::Whole)),
        Axes::Auto => Ok(declared()?.map(Planes::Each)),
        Axes::Tzyx => declared()?.map(|z| Some(Planes::Each(z))).ok_or_else(|| {
            BridgeError::invalid_argument(
                "--axes",
                format!(
                    "{name}: tzyx needs the number of z planes, and the file does not declare \
                     it (a TIFF's ImageJ `slices=` or OME `SizeZ`, a 4-D .npy's shape); save \
                     it with its axes, or give one volume per file with --axes zyx"
                ),
            )
        }),
    }
}

/// What volumes are detected with: scikit-image's n-D `blob_log` or trackpy's 3-D `locate`.
enum VolumeMethod {
    Log(BlobLogNdParams),
    Locate(LocateNdParams),
}

/// The n-D parameters of `args` for volumes, checked; flags of 2-D frames only are refused in
/// words.
fn volume_method(args: &Args) -> Result<VolumeMethod> {
    if args.method == Method::Locate {
        return locate_nd_params(args).map(VolumeMethod::Locate);
    }
    nd_params(args).map(VolumeMethod::Log)
}

/// trackpy's 3-D `locate` parameters of `args` (sizes per axis or one for all; checked against
/// the volume by `locate_nd`).
fn locate_nd_params(args: &Args) -> Result<LocateNdParams> {
    let diameter = args.diameter.as_ref().ok_or_else(|| {
        BridgeError::invalid_argument(
            "--diameter",
            "--method locate needs --diameter (an odd integer, or one per axis: z,y,x)",
        )
    })?;
    if args.refine {
        return Err(BridgeError::invalid_argument(
            "--refine",
            "refinement is for 2-D frames, not volumes",
        ));
    }
    let p = LocateNdParams {
        minmass: args.minmass,
        maxsize: args.maxsize,
        separation: args.separation.as_ref().map(|s| s.0.clone()),
        noise_size: args.noise_size.0.clone(),
        smoothing_size: args.smoothing_size.as_ref().map(|s| s.0.clone()),
        threshold: args.locate_threshold,
        invert: args.invert,
        percentile: args.percentile,
        topn: args.topn,
        preprocess: !args.no_preprocess,
        ..LocateNdParams::new(diameter.0.clone())
    };
    // volumes are 3-D: checked before any input is read
    p.validate(3)?;
    Ok(p)
}

/// scikit-image's n-D `blob_log` parameters of `args`.
fn nd_params(args: &Args) -> Result<BlobLogNdParams> {
    let refuse = |flag: &str, why: &str| Err(BridgeError::invalid_argument(flag, why));
    if args.refine {
        return refuse("--refine", "refinement is for 2-D frames, not volumes");
    }
    if args.fast {
        return refuse(
            "--fast",
            "volumes are detected in float64 (scikit-image's results, on every device); \
             --fast is for 2-D frames on a device",
        );
    }
    let sigma = |s: &SigmaArg| match s.0.as_slice() {
        [x] => Sigma::Scalar(*x),
        v => Sigma::PerAxis(v.to_vec()),
    };
    Ok(BlobLogNdParams {
        min_sigma: sigma(&args.min_sigma),
        max_sigma: sigma(&args.max_sigma),
        num_sigma: args.num_sigma,
        threshold: args.threshold.0,
        threshold_rel: args.threshold_rel.0,
        overlap: args.overlap,
        log_scale: args.log_scale,
        exclude_border: match args.exclude_border {
            0 => Border::None,
            n => Border::All(n),
        },
    })
}

/// Volumes run on one device: the one `--device` names (or this rank's), the CPU for `auto`;
/// a list of several devices is refused (never a silent change of device).
fn volume_choice(args: &Args, place: &Where) -> Result<Choice> {
    let refuse = |d: String| {
        Err(BridgeError::Unsupported(format!(
            "volumes are detected one at a time on one device; --device {d} names several: \
             name one (cpu, opencl:N or cuda:N) or auto"
        )))
    };
    let chosen = |device: Device, reason: &str, auto: bool| {
        Ok(Choice {
            device,
            reason: reason.to_owned(),
            estimate: None,
            auto,
        })
    };
    match place {
        Where::Arg(Some(list)) => match list.as_slice() {
            [d] => chosen(*d, "volumes are detected on the device named", false),
            _ => refuse(
                list.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        },
        Where::Rank(d, _) => chosen(*d, "volumes are detected on this rank's device", false),
        #[cfg(feature = "mpi")]
        Where::Ranks(_) => refuse("(MPI ranks)".to_owned()),
        Where::Arg(None) => match &args.device {
            DeviceArg::Explicit(d) => chosen(*d, "volumes are detected on the device named", false),
            DeviceArg::AllGpus | DeviceArg::Several(_) => refuse(args.device.to_string()),
            DeviceArg::Auto => chosen(
                Device::Cpu,
                "volumes are detected on the CPU (auto: name a device to run them there)",
                true,
            ),
        },
    }
}

/// The rows of one volume's blobs or features, with the frame first.
fn write_rows(
    w: &mut arraybridge::io::csv::TableWriter,
    frame: usize,
    rows: &[Vec<f64>],
) -> Result<()> {
    w.write_number_rows(rows, |r, row| {
        row.num(frame);
        for &v in r {
            row.num(v);
        }
    })
}

/// The CSV header of volumes with `sigma_columns` σ columns.
fn header(sigma_columns: usize) -> Vec<&'static str> {
    let mut h = vec!["frame", "z", "y", "x"];
    if sigma_columns == 1 {
        h.push("sigma");
    } else {
        h.extend(["sigma_z", "sigma_y", "sigma_x"]);
    }
    h
}

/// Detect the volumes of `input` (grouped as `planes` says) into `output`.
pub(super) fn detect_volumes(
    job: &Job<'_>,
    input: &Path,
    output: &Path,
    place: &Where,
    planes: Planes,
) -> Result<Done> {
    let args = job.args;
    let method = volume_method(args)?;
    let choice = volume_choice(args, place)?;
    let device = arraybridge::open_device(choice.device)?;
    let start = Instant::now();
    let name = input.display().to_string();
    let z = match planes {
        Planes::Each(z) if z >= 1 => z,
        Planes::Each(_) => {
            return Err(BridgeError::InvalidInput(
                format!("{name}: a volume of 0 planes").into(),
            ));
        }
        Planes::Whole => usize::MAX,
    };
    let stream = MovieStream::open_planes(input, z)?;
    let mut w = create_writer(output)?;
    if let VolumeMethod::Log(p) = &method {
        let sigma_columns = match (&p.min_sigma, &p.max_sigma) {
            (Sigma::Scalar(_), Sigma::Scalar(_)) => 1,
            _ => 3,
        };
        w.write_record(header(sigma_columns))?;
    }
    let (mut volumes, mut n, mut dims) = (0usize, 0usize, None);
    // one volume per piece: its errors name the volume's number (`pieces`)
    for piece in pieces(ReadAhead::new(stream, 1)?, |_| 1) {
        let piece = piece?;
        let chunk = &piece.data;
        let (d, h, wd) = chunk.dim();
        if z != usize::MAX && d != z {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{name}: the last volume has {d} planes, not {z}: the file's planes are not \
                     a whole number of volumes of {z}"
                )
                .into(),
            ));
        }
        let view = match chunk {
            Movie::U8(a) => VolumeView::U8(a.view().into_dyn()),
            Movie::U16(a) => VolumeView::U16(a.view().into_dyn()),
            Movie::F32(a) => VolumeView::F32(a.view().into_dyn()),
            Movie::F64(a) => VolumeView::F64(a.view().into_dyn()),
        };
        let rows = match &method {
            VolumeMethod::Log(p) => {
                piece
                    .errors(blob_log_nd_on_device(&device, view, args.prescale, p))?
                    .rows
            }
            VolumeMethod::Locate(p) => {
                let f = piece.errors(locate_nd_on_device(&device, view, p))?;
                if volumes == 0 {
                    // trackpy's columns (they depend on the parameters only)
                    let mut h = vec!["frame"];
                    h.extend(f.columns.iter().map(String::as_str));
                    w.write_record(h)?;
                }
                f.rows
            }
        };
        write_rows(&mut w, piece.frames.start, &rows)?;
        n += rows.len();
        dims.get_or_insert((d, h, wd, chunk.dtype_name()));
        volumes = piece.frames.end;
    }
    let (d, h, wd, dtype) = dims.ok_or_else(|| {
        BridgeError::InvalidInput(format!("{name}: the stack has no plane").into())
    })?;
    w.finish()?;
    job.g.note(format!(
        "detect: {volumes} volume(s) of {d}x{h}x{wd} (z, y, x) from {name}"
    ));
    Ok(Done {
        frames: volumes,
        height: h,
        width: wd,
        dtype,
        detections: n,
        seconds: start.elapsed().as_secs_f64(),
        runner: Runner::One(choice),
    })
}

#[cfg(test)]
mod tests {
    use super::header;

    #[test]
    fn headers() {
        assert_eq!(header(1), ["frame", "z", "y", "x", "sigma"]);
        assert_eq!(
            header(3),
            ["frame", "z", "y", "x", "sigma_z", "sigma_y", "sigma_x"]
        );
    }
}
