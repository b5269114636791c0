//! `arraybridge detect`: particle detection (LoG `blob_log` or trackpy `locate`) on a movie.
//!
//! Output CSV (coordinates are (row, column), 0-based, pixel centres at integers):
//! * `--method log`: `frame,y,x,sigma,response`, plus with `--refine`
//!   `y_refined,x_refined,mass,size,ecc,signal,background`;
//! * `--method locate`: `frame,y,x,mass,size,ecc,signal,raw_mass,ep`.
//!
//! This module (`detect/mod.rs`) holds the run (one input with `-o`, under mpirun its chunks
//! shared by the ranks) and what every input shares; the other files of `detect/`: `args.rs`
//! the flags and their value parsers, `stream.rs` one input read and detected chunk by chunk
//! (the next chunk read while this one is detected), `multi.rs` several devices (or MPI ranks)
//! at once, `output.rs` the CSV, and `files.rs` several inputs with `--out-dir` (their outputs,
//! each input's report, the hand-out to MPI ranks, the summary).

mod args;
mod files;
mod multi;
mod output;
mod stream;
mod volume;

use std::path::Path;

use algorithms::detect::{BlobLogParams, LocateParams, LogDetector, Precision, RefineParams};
use bridge_core::{BridgeError, Result};

use super::common::{Global, check_output_file};
use super::device::{DETECT, DeviceArg, check_explicit};

pub use args::{Args, Method};
use files::{plan_outputs, run_files};
#[cfg(feature = "mpi")]
use multi::Multi;
use multi::Runner;
pub(super) use output::{particle_header, particle_row};
use stream::{Done, detect_frames};

/// Detect one input into `output` on `place`: volume by volume when it is a z-stack
/// (`volume.rs`), else chunk by chunk of 2-D frames (`stream.rs`).
fn detect_one(job: &Job<'_>, input: &Path, output: &Path, place: Where) -> Result<Done> {
    match volume::planes_of(job.args, input)? {
        Some(planes) => volume::detect_volumes(job, input, output, &place, planes),
        None => detect_frames(job, input, output, place),
    }
}

/// Whether a `locate` size flag gives one value per axis (a volume's).
fn sizes_per_axis(args: &Args) -> bool {
    let many = |n: Option<usize>| n.is_some_and(|n| n > 1);
    many(args.diameter.as_ref().map(|d| d.0.len()))
        || many(args.separation.as_ref().map(|d| d.0.len()))
        || many(Some(args.noise_size.0.len()))
        || many(args.smoothing_size.as_ref().map(|d| d.0.len()))
}

fn locate_params(args: &Args) -> Result<LocateParams> {
    let diameter = args
        .diameter
        .as_ref()
        .ok_or_else(|| {
            BridgeError::invalid_argument(
                "--diameter",
                "--method locate needs --diameter (an odd integer)",
            )
        })?
        .scalar("--diameter")?;
    let p = LocateParams {
        diameter,
        minmass: args.minmass,
        maxsize: args.maxsize,
        separation: args
            .separation
            .as_ref()
            .map(|s| s.scalar("--separation"))
            .transpose()?,
        noise_size: args.noise_size.scalar("--noise-size")?,
        smoothing_size: args
            .smoothing_size
            .as_ref()
            .map(|s| s.scalar("--smoothing-size"))
            .transpose()?,
        threshold: args.locate_threshold,
        invert: args.invert,
        percentile: args.percentile,
        topn: args.topn,
        preprocess: !args.no_preprocess,
        max_iterations: 10,
        characterize: true,
    };
    p.validate()?;
    Ok(p)
}

/// What every input shares: the checked parameters and switches.
#[derive(Clone, Copy)]
struct Job<'a> {
    args: &'a Args,
    det: &'a LogDetector,
    locate: Option<&'a LocateParams>,
    batch_size: usize,
    chunk_frames: usize,
    chunk_bytes: usize,
    g: Global,
}

/// Where one input runs.
enum Where {
    /// `--device` as given: one device or `auto` (`None`), or these several in this process
    /// (already checked).
    Arg(Option<Vec<bridge_core::Device>>),
    /// This rank's own device and how it was chosen (inputs handed out over MPI ranks).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    Rank(bridge_core::Device, String),
    /// Rank 0 sharing the chunks of one movie with the other ranks.
    #[cfg(feature = "mpi")]
    Ranks(Multi),
}

/// Run `arraybridge detect`.
pub fn run(args: Args, g: Global) -> Result<()> {
    let batch_size = usize::try_from(args.batch_size)
        .map_err(|_| BridgeError::invalid_argument("--batch-size", "too large"))?;
    let det = LogDetector {
        params: BlobLogParams {
            min_sigma: args.min_sigma.0.first().copied().unwrap_or(1.0),
            max_sigma: args.max_sigma.0.first().copied().unwrap_or(50.0),
            num_sigma: args.num_sigma,
            threshold: args.threshold.0,
            threshold_rel: args.threshold_rel.0,
            overlap: args.overlap,
            log_scale: args.log_scale,
            exclude_border: (args.exclude_border, args.exclude_border),
            prescale: args.prescale,
        },
        batch_size,
        refine: args.refine.then(RefineParams::default),
        precision: if args.fast {
            Precision::F32
        } else {
            Precision::Auto
        },
    };
    // Everything that can be checked before reading the movie is checked first.
    if let Some(flag) = args.other_methods_flag() {
        let (this, other) = match args.method {
            Method::Log => ("the LoG (the default --method log)", "--method locate"),
            Method::Locate => ("--method locate", "the LoG (--method log)"),
        };
        return Err(BridgeError::invalid_argument(
            flag,
            format!("is a setting of {other}; {this} does not read it"),
        ));
    }
    let locate = match args.method {
        Method::Log => {
            det.params.validate()?;
            None
        }
        // sizes per axis are for volumes: checked per input (`volume.rs`; 2-D frames refuse
        // them in `detect_frames`)
        Method::Locate if sizes_per_axis(&args) => None,
        Method::Locate => Some(locate_params(&args)?),
    };
    let chunk_frames = usize::try_from(args.chunk_frames)
        .map_err(|_| BridgeError::invalid_argument("--chunk-frames", "too large"))?;
    let chunk_bytes = usize::try_from(args.chunk_mb << 20)
        .map_err(|_| BridgeError::invalid_argument("--chunk-mb", "too large for this machine"))?;
    let job = Job {
        args: &args,
        det: &det,
        locate: locate.as_ref(),
        batch_size,
        chunk_frames,
        chunk_bytes,
        g,
    };
    match (&args.out_dir, &args.output, args.input.as_slice()) {
        (None, Some(output), [input]) => run_single(&job, input, output),
        (Some(dir), _, inputs) => run_files(&job, &plan_outputs(dir, inputs)?),
        (None, _, [_]) => Err(BridgeError::invalid_argument(
            "--output",
            "give the output CSV with -o FILE (or a folder with --out-dir DIR)",
        )),
        (None, _, inputs) => Err(BridgeError::invalid_argument(
            "--out-dir",
            format!(
                "{} inputs need --out-dir DIR (one CSV per input, DIR/<stem>.csv); -o names the \
                 output of a single input",
                inputs.len()
            ),
        )),
    }
}

/// The devices of `--device` for one process, each checked before any input is read
/// (`None`: one device or `auto`).
fn local_devices(job: &Job<'_>) -> Result<Option<Vec<bridge_core::Device>>> {
    let args = job.args;
    if let DeviceArg::Explicit(d) = &args.device {
        check_explicit(*d, &[DETECT])?;
    }
    args.device.devices(DETECT)
}

/// An input error of `input`'s content (a NaN pixel, frames of another size...) that does not
/// name the file yet, named (`FILE: in frames a..b: what`), as the errors of its reader are;
/// other errors as they are.
fn input_named(input: &Path, e: BridgeError) -> BridgeError {
    let name = input.display().to_string();
    match e {
        BridgeError::InvalidInput(m) if !m.to_string().contains(&name) => {
            BridgeError::InvalidInput(format!("{name}: {m}").into())
        }
        other => other,
    }
}

/// One input, `-o FILE`: under mpirun its chunks are shared by the ranks.
fn run_single(job: &Job<'_>, input: &Path, output: &Path) -> Result<()> {
    let args = job.args;
    let g = job.g;
    // under mpirun: one device per rank; the other ranks detect what rank 0 hands out
    #[cfg(feature = "mpi")]
    let mut on_ranks = None;
    #[cfg(feature = "mpi")]
    if let Some(p) = super::mpi::place() {
        let (device, how) = super::device::rank_device(&args.device, DETECT, p.local_rank)?;
        if p.rank != 0 {
            while let Some(chunk) = super::mpi::share_movie(None)? {
                match job.locate {
                    None => job.det.serve_frames(
                        &chunk,
                        device,
                        &arraybridge::open_device,
                        &mut super::mpi::RootLink,
                    )?,
                    Some(lp) => algorithms::detect::serve_locate(
                        &chunk,
                        lp,
                        device,
                        &arraybridge::open_device,
                        &mut super::mpi::RootLink,
                    )?,
                }
            }
            return Ok(());
        }
        g.note(format!(
            "detect: {} MPI ranks ({} on this node); rank 0 on {device} ({how})",
            p.size, p.local_size
        ));
        on_ranks = Some(Multi::ranks(device, p.size)?);
    }
    #[cfg(feature = "mpi")]
    let place = match on_ranks {
        Some(m) => Where::Ranks(m),
        None => Where::Arg(local_devices(job)?),
    };
    #[cfg(not(feature = "mpi"))]
    let place = Where::Arg(local_devices(job)?);
    check_output_file(output, &[input], "--output")?;
    let done = detect_one(job, input, output, place).map_err(|e| input_named(input, e))?;
    let Done {
        frames: t,
        height: h,
        width: w,
        dtype,
        detections: n,
        seconds: secs,
        runner,
    } = done;
    #[cfg(feature = "mpi")]
    if let Runner::Several(m) = &runner
        && !m.peers.is_empty()
    {
        super::mpi::end_of_movie();
    }
    let method = method_name(args.method);
    let (device_text, reason, multi) = match &runner {
        Runner::One(c) => (c.device.to_string(), Some(c.reason.clone()), None),
        Runner::Several(m) => (m.device_text(), None, Some(m)),
    };
    if g.json {
        g.print_json(&serde_json::json!({
            "command": "detect",
            "input": input.display().to_string(),
            "output": output.display().to_string(),
            "frames": t, "height": h, "width": w, "dtype": dtype,
            "method": method,
            "detections": n,
            "seconds": secs,
            "device": device_text,
            "device_reason": reason,
            "devices": multi.map(|m| m.shares.iter().enumerate().map(|(i, s)| {
                let mut j = serde_json::to_value(s).unwrap_or_default();
                if m.ranked {
                    j["rank"] = i.into();
                }
                j
            }).collect::<Vec<_>>()),
        }))?;
    } else {
        g.note(format!(
            "detect: {t} frames of {h}x{w} {}, {n} detections, {secs:.3} s ({:.1} frames/s), method {method}, device {}",
            dtype,
            t as f64 / secs.max(1e-9),
            device_text
        ));
        if let Some(m) = multi {
            m.print_shares(g);
        }
    }
    Ok(())
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::Log => "log",
        Method::Locate => "locate",
    }
}
