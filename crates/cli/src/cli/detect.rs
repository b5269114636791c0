//! `arraybridge detect`: particle detection (LoG `blob_log` or trackpy `locate`) on a movie.
//!
//! Output CSV (coordinates are (row, column), 0-based, pixel centres at integers):
//! * `--method log`: `frame,y,x,sigma,response`, plus with `--refine`
//!   `y_refined,x_refined,mass,size,ecc,signal,background`;
//! * `--method locate`: `frame,y,x,mass,size,ecc,signal,raw_mass,ep`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use algorithms::detect::{
    Accumulate, DetectBackend, DetectMember, DeviceShare, Feature, LocateParams, LogDetector,
    Movie, MultiPolicy, Particle, Prescale, RefineParams, backend_for, locate_movie_members,
};
use bridge_core::{BridgeError, Result};

use arraybridge::io::csv::{NumberRow, TableWriter, create_writer};
use arraybridge::io::stream::MovieStream;

use super::common::{Global, check_output_dir, check_output_file};
use super::device::{
    Choice, DETECT, DeviceArg, check_explicit, detect_estimate, detect_workload, nominal_cpu,
    parse_device_arg, resolve,
};

/// Detection method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// Laplacian-of-Gaussian blobs (scikit-image `blob_log`).
    Log,
    /// Crocker–Grier centroids (trackpy `locate`).
    Locate,
}

/// A number or `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaybeF64(pub Option<f64>);

fn parse_opt_f64(s: &str) -> std::result::Result<MaybeF64, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(MaybeF64(None));
    }
    t.parse::<f64>()
        .map_err(|_| format!("expected a number or `none`, got {s:?}"))
        .and_then(|v| {
            if v.is_finite() {
                Ok(MaybeF64(Some(v)))
            } else {
                Err(format!("{s:?} is not finite"))
            }
        })
}

/// `--precision`: not a mode of this tool. The LoG passes accumulate in float64 (default) or
/// float32 (`--fast`); a float16 mode was left out (see `docs/perf.md`, "Precision"), so every
/// value is a usage error that says so.
fn parse_precision(s: &str) -> std::result::Result<String, String> {
    let how = "detection computes in float64 (the default, the CPU's results) or float32 \
               (`--fast`: the LoG passes in f32); there is no --precision flag";
    if s.trim().eq_ignore_ascii_case("f16") || s.trim().eq_ignore_ascii_case("half") {
        Err(format!(
            "--precision f16 is not available: no device here has f16 arithmetic to check that \
             f16 detections match the f32 path on the fixtures (PoCL lacks cl_khr_fp16), so the \
             mode was left out; {how}"
        ))
    } else {
        Err(format!("unknown precision {s:?}: {how}"))
    }
}

fn parse_prescale(s: &str) -> std::result::Result<Prescale, String> {
    s.parse::<Prescale>().map_err(|e| e.to_string())
}

/// Arguments of `arraybridge detect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input movies: multi-page TIFF (u8, u16, f32), .npy (2-D or 3-D), or a folder of
    /// single-frame TIFF/PNG files (name order). Several inputs need `--out-dir`; they are
    /// detected one after another (under mpirun, handed out to the ranks).
    #[arg(required = true, num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// Output CSV (one input).
    #[arg(short = 'o', long = "output", conflicts_with = "out_dir")]
    pub output: Option<PathBuf>,
    /// Output folder (created if needed): one CSV per input, named from the input's stem
    /// (`DIR/a.csv` for `a.tif`), written under a temporary name and renamed when complete.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// With `--out-dir`: a file that fails is reported and the others go on; the failed files
    /// are listed at the end and the exit status is non-zero. Default: the first failure ends
    /// the run.
    #[arg(long)]
    pub keep_going: bool,
    /// Detection method.
    #[arg(long, value_enum, default_value_t = Method::Log)]
    pub method: Method,

    /// [log] Smallest σ (blob_log default 1).
    #[arg(long, default_value_t = 1.0)]
    pub min_sigma: f64,
    /// [log] Largest σ (blob_log default 50).
    #[arg(long, default_value_t = 50.0)]
    pub max_sigma: f64,
    /// [log] Number of scales (blob_log default 10).
    #[arg(long, default_value_t = 10)]
    pub num_sigma: usize,
    /// [log] Absolute threshold, a number or `none` (= cube minimum). blob_log default 0.2, in
    /// prescaled units: with the legacy prescale, u16 input is divided by 65535.
    #[arg(long, value_parser = parse_opt_f64, default_value = "0.2")]
    pub threshold: MaybeF64,
    /// [log] Relative threshold (fraction of the cube maximum), a number or `none` (default).
    #[arg(long, value_parser = parse_opt_f64, default_value = "none")]
    pub threshold_rel: MaybeF64,
    /// [log] Overlap fraction above which the smaller blob is removed (default 0.5).
    #[arg(long, default_value_t = 0.5)]
    pub overlap: f64,
    /// [log] Logarithmically spaced scales.
    #[arg(long)]
    pub log_scale: bool,
    /// [log] Drop peaks within this many pixels of the border (default 0).
    #[arg(long, default_value_t = 0)]
    pub exclude_border: usize,
    /// [log] Input scaling: legacy (img_as_float), minmax, none, or range:C,D.
    #[arg(long, value_parser = parse_prescale, default_value = "legacy")]
    pub prescale: Prescale,
    /// [log] Sub-pixel refinement and per-particle measures (extra columns).
    #[arg(long)]
    pub refine: bool,
    /// [log] Accumulate the LoG filters in f32 (faster; cube within ~1e-7 of SciPy's, so only
    /// responses within that distance of the threshold can change). Default: exact f64.
    #[arg(long)]
    pub fast: bool,
    /// Not a mode: any value (`f16` included) is a usage error explaining why (float64 by
    /// default, float32 with `--fast`; f16 was left out, docs/perf.md "Precision").
    #[arg(long, hide = true, value_parser = parse_precision)]
    pub precision: Option<String>,

    /// [locate] Feature diameter (odd); required with --method locate.
    #[arg(long)]
    pub diameter: Option<usize>,
    /// [locate] Minimum integrated brightness (strict `mass > minmass`).
    #[arg(long, default_value_t = 0.0)]
    pub minmass: f64,
    /// [locate] Maximum radius of gyration.
    #[arg(long)]
    pub maxsize: Option<f64>,
    /// [locate] Minimum separation (default diameter + 1).
    #[arg(long)]
    pub separation: Option<f64>,
    /// [locate] Gaussian lowpass width (default 1).
    #[arg(long, default_value_t = 1.0)]
    pub noise_size: f64,
    /// [locate] Boxcar background width (default diameter).
    #[arg(long)]
    pub smoothing_size: Option<usize>,
    /// [locate] Percentile of non-zero pixels a maximum must exceed (default 64).
    #[arg(long, default_value_t = 64.0)]
    pub percentile: f64,
    /// [locate] Keep only the N brightest features per frame.
    #[arg(long)]
    pub topn: Option<usize>,
    /// [locate] Skip the bandpass.
    #[arg(long)]
    pub no_preprocess: bool,
    /// [locate] Dark features on a bright background.
    #[arg(long)]
    pub invert: bool,
    /// [locate] Bandpass threshold (default 1 for integer input, 1/255 for float input).
    #[arg(long)]
    pub locate_threshold: Option<f64>,

    /// Device: `auto` (the offload decision, printed), `cpu`, `cuda:N` or `opencl:N`; or several
    /// at once, `opencl:0,opencl:1` or `all` (every GPU): frames go to whichever device is
    /// free, results are the same as on one device.
    #[arg(long, default_value = "auto", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// With several devices: a device that fails hands its frames to the others (reported)
    /// instead of failing the run. Out-of-memory is always handled (the batch is split).
    #[arg(long)]
    pub requeue: bool,
    /// Frames read and detected at a time, at most: memory is bounded by one chunk (the next one
    /// is read while this one is detected), whatever the movie's length; results do not depend
    /// on it.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub chunk_frames: u64,
    /// Pixel bytes of one chunk, at most, in MiB (at least one frame a chunk): with large frames
    /// this bounds the chunk before `--chunk-frames` does (2048² u16 frames: 16 a chunk).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub chunk_mb: u64,
    /// Frames per batch (a device launch / a parallel CPU chunk); does not change results.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch_size: u64,
}

/// The `--method log` columns: `frame,y,x,sigma,response`, and with `refine` the refinement's
/// `y_refined,x_refined,mass,size,ecc,signal,background`.
pub(super) fn particle_header(refine: bool) -> Vec<&'static str> {
    let mut header = vec!["frame", "y", "x", "sigma", "response"];
    if refine {
        header.extend([
            "y_refined",
            "x_refined",
            "mass",
            "size",
            "ecc",
            "signal",
            "background",
        ]);
    }
    header
}

/// One particle's fields under [`particle_header`]; with `refine`, a particle without a
/// refinement gets empty refinement fields.
pub(super) fn particle_row(p: &Particle, refine: bool, row: &mut NumberRow<'_>) {
    row.num(p.frame);
    for v in [p.y, p.x, p.sigma, p.response] {
        row.num(v);
    }
    if refine {
        match &p.refined {
            Some(r) => {
                for v in [r.y, r.x, r.mass, r.size, r.ecc, r.signal, r.background] {
                    row.num(v);
                }
            }
            None => (0..7).for_each(|_| row.empty()),
        }
    }
}

/// The output CSV, written chunk by chunk as detections come.
struct Output {
    w: TableWriter,
    /// `--refine`: the refinement's columns too.
    refine: bool,
}

impl Output {
    fn log(path: &Path, refine: bool) -> Result<Self> {
        let mut w = create_writer(path)?;
        w.write_record(particle_header(refine))?;
        Ok(Output { w, refine })
    }

    fn locate(path: &Path) -> Result<Self> {
        let mut w = create_writer(path)?;
        w.write_record([
            "frame", "y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep",
        ])?;
        Ok(Output { w, refine: false })
    }

    fn particles(&mut self, ps: &[Particle]) -> Result<()> {
        let refine = self.refine;
        self.w
            .write_number_rows(ps, |p, row| particle_row(p, refine, row))
    }

    fn features(&mut self, rows: &[(usize, Feature)]) -> Result<()> {
        self.w.write_number_rows(rows, |(t, f), row| {
            row.num(*t);
            for v in [f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep] {
                row.num(v);
            }
        })
    }

    fn finish(self) -> Result<()> {
        self.w.finish()
    }
}

fn locate_params(args: &Args) -> Result<LocateParams> {
    let diameter = args.diameter.ok_or_else(|| {
        BridgeError::invalid_argument(
            "--diameter",
            "--method locate needs --diameter (an odd integer)",
        )
    })?;
    let p = LocateParams {
        diameter,
        minmass: args.minmass,
        maxsize: args.maxsize,
        separation: args.separation,
        noise_size: args.noise_size,
        smoothing_size: args.smoothing_size,
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

fn run_locate(
    p: &LocateParams,
    batch_size: usize,
    movie: &Movie,
    frame0: usize,
    backend: &dyn DetectBackend,
) -> Result<Vec<(usize, Feature)>> {
    let frames = movie.frames();
    let mut out = Vec::new();
    for (bi, batch) in frames.chunks(batch_size).enumerate() {
        let res = backend.locate_batch(batch, p)?;
        for (k, feats) in res.into_iter().enumerate() {
            out.extend(feats.into_iter().map(|f| (frame0 + bi * batch_size + k, f)));
        }
    }
    Ok(out)
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

/// One input detected: what the summaries print.
struct Done {
    frames: usize,
    height: usize,
    width: usize,
    dtype: &'static str,
    detections: usize,
    seconds: f64,
    runner: Runner,
}

/// One input's line of a run over several inputs (summary, `--json`, and the message a worker
/// rank sends rank 0).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct FileReport {
    /// The input.
    input: String,
    /// The CSV written (nothing when it failed).
    output: String,
    /// Frames read.
    frames: usize,
    /// Detections written.
    detections: usize,
    /// The device(s), comma-separated.
    device: String,
    /// The MPI rank that did it (under mpirun).
    #[serde(skip_serializing_if = "Option::is_none")]
    rank: Option<usize>,
    /// Seconds from opening the input to the renamed CSV.
    seconds: f64,
    /// Why it failed (with `--keep-going`).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Run `arraybridge detect`.
pub fn run(args: Args, g: Global) -> Result<()> {
    let batch_size = usize::try_from(args.batch_size)
        .map_err(|_| BridgeError::invalid_argument("--batch-size", "too large"))?;
    let det = LogDetector {
        min_sigma: args.min_sigma,
        max_sigma: args.max_sigma,
        num_sigma: args.num_sigma,
        threshold: args.threshold.0,
        threshold_rel: args.threshold_rel.0,
        overlap: args.overlap,
        log_scale: args.log_scale,
        exclude_border: (args.exclude_border, args.exclude_border),
        prescale: args.prescale,
        batch_size,
        refine: args.refine.then(RefineParams::default),
        accumulate: if args.fast {
            Accumulate::F32
        } else {
            Accumulate::F64
        },
    };
    // Everything that can be checked before reading the movie is checked first.
    let locate = match args.method {
        Method::Log => {
            det.params().validate()?;
            None
        }
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

/// The output of every input, `DIR/<stem>.csv`, checked before any work: two inputs with the
/// same stem are an error, and no output may be an input. Creates `dir`.
fn plan_outputs(dir: &Path, inputs: &[PathBuf]) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut names: Vec<String> = Vec::with_capacity(inputs.len());
    for input in inputs {
        let stem = input
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty() && !s.starts_with('.'))
            .ok_or_else(|| {
                BridgeError::invalid_argument(
                    "input",
                    format!("{} has no file name to name its output", input.display()),
                )
            })?;
        let name = format!("{stem}.csv");
        if let Some(k) = names.iter().position(|n| *n == name) {
            return Err(BridgeError::invalid_argument(
                "--out-dir",
                format!(
                    "{} and {} would both write {}; rename one of them or run them separately",
                    inputs[k].display(),
                    input.display(),
                    dir.join(&name).display()
                ),
            ));
        }
        names.push(name);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let input_refs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    check_output_dir(dir, &refs, &input_refs, "--out-dir")?;
    Ok(inputs
        .iter()
        .zip(&names)
        .map(|(i, n)| (i.clone(), dir.join(n)))
        .collect())
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
                    None => job
                        .det
                        .serve_frames(&chunk, device, &mut super::mpi::RootLink)?,
                    Some(lp) => algorithms::detect::serve_locate(
                        &chunk,
                        lp,
                        device,
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
    let done = detect_one(job, input, output, place)?;
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

/// An error that names `input` (unless its message already does).
fn naming(input: &Path, e: BridgeError) -> BridgeError {
    let name = input.display().to_string();
    if e.to_string().contains(&name) {
        e
    } else {
        BridgeError::InvalidInput(format!("{name}: {e}"))
    }
}

/// One input of several, detected into `output` (staged like every output: a failure leaves no
/// partial file). With `--keep-going` a failure is a report with its error; otherwise the
/// error, naming the input.
fn one_file(
    job: &Job<'_>,
    input: &Path,
    output: &Path,
    place: Where,
    rank: Option<usize>,
) -> Result<FileReport> {
    let start = Instant::now();
    // the CSV is staged (`io::staged`): renamed into place when complete, removed on a failure
    let r = detect_one(job, input, output, place);
    let mut report = FileReport {
        input: input.display().to_string(),
        rank,
        ..FileReport::default()
    };
    match r {
        Ok(done) => {
            report.output = output.display().to_string();
            report.frames = done.frames;
            report.detections = done.detections;
            report.device = match &done.runner {
                Runner::One(c) => c.device.to_string(),
                Runner::Several(m) => m.device_text(),
            };
            report.seconds = start.elapsed().as_secs_f64();
            Ok(report)
        }
        Err(e) => {
            let e = naming(input, e);
            if !job.args.keep_going {
                return Err(e);
            }
            job.g.note(format!("detect: failed (going on): {e}"));
            report.seconds = start.elapsed().as_secs_f64();
            report.error = Some(e.to_string());
            Ok(report)
        }
    }
}

/// Several inputs (`--out-dir`): one after another in this process, or handed out to the
/// ranks under mpirun.
fn run_files(job: &Job<'_>, files: &[(PathBuf, PathBuf)]) -> Result<()> {
    let start = Instant::now();
    #[cfg(feature = "mpi")]
    if let Some(p) = super::mpi::place() {
        let reports = files_on_ranks(job, files, p)?;
        return summarise_files(job, &reports, start);
    }
    let several = local_devices(job)?;
    let mut reports = Vec::with_capacity(files.len());
    for (input, output) in files {
        reports.push(one_file(
            job,
            input,
            output,
            Where::Arg(several.clone()),
            None,
        )?);
    }
    summarise_files(job, &reports, start)
}

/// Under mpirun with several inputs: rank 0 hands out the inputs one at a time to whichever
/// rank asks (each rank reports its last input when it asks for the next) and detects inputs
/// itself too, on its own device; every rank reads its input and writes its CSV. Rank 0 gets
/// every report (in input order); the other ranks get an empty list.
#[cfg(feature = "mpi")]
fn files_on_ranks(
    job: &Job<'_>,
    files: &[(PathBuf, PathBuf)],
    p: super::mpi::Place,
) -> Result<Vec<FileReport>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (device, how) = super::device::rank_device(&job.args.device, DETECT, p.local_rank)?;
    let quiet = Job {
        g: Global {
            quiet: true,
            json: false,
        },
        ..*job
    };
    if p.rank != 0 {
        let mut last = Vec::new();
        while let Some(i) = super::mpi::ask_file(&last)? {
            let (input, output) = files.get(i).ok_or_else(|| {
                BridgeError::backend("mpi", None, format!("rank 0 handed out input {i}"))
            })?;
            let r = one_file(
                &quiet,
                input,
                output,
                Where::Rank(device, how.clone()),
                Some(p.rank),
            )?;
            last = serde_json::to_vec(&(i, r)).unwrap_or_default();
        }
        return Ok(Vec::new());
    }
    job.g.note(format!(
        "detect: {} inputs over {} MPI ranks; rank 0 on {device} ({how}) hands them out and detects too",
        files.len(),
        p.size
    ));
    let next = AtomicUsize::new(0);
    let take = || {
        let i = next.fetch_add(1, Ordering::SeqCst);
        (i < files.len()).then_some(i)
    };
    let stop = AtomicBool::new(false);
    let reports: Mutex<Vec<Option<FileReport>>> = Mutex::new(vec![None; files.len()]);
    let put = |i: usize, r: FileReport| {
        if let Some(slot) = reports.lock().unwrap_or_else(|e| e.into_inner()).get_mut(i) {
            *slot = Some(r);
        }
    };
    std::thread::scope(|s| -> Result<()> {
        let server = s.spawn(|| -> Result<()> {
            let mut working = p.size - 1;
            while working > 0 {
                let Some((rank, last)) = super::mpi::file_request(&stop)? else {
                    return Ok(());
                };
                if !last.is_empty() {
                    let (i, r): (usize, FileReport) =
                        serde_json::from_slice(&last).map_err(|e| {
                            BridgeError::backend(
                                "mpi",
                                None,
                                format!("rank {rank} sent an unreadable report: {e}"),
                            )
                        })?;
                    put(i, r);
                }
                let i = take();
                if i.is_none() {
                    working -= 1;
                }
                super::mpi::give_file(rank, i)?;
            }
            Ok(())
        });
        let own = (|| -> Result<()> {
            while let Some(i) = take() {
                let (input, output) = &files[i];
                let r = one_file(
                    &quiet,
                    input,
                    output,
                    Where::Rank(device, how.clone()),
                    Some(0),
                )?;
                put(i, r);
            }
            Ok(())
        })();
        if own.is_err() {
            stop.store(true, Ordering::SeqCst);
        }
        let served = server.join().unwrap_or_else(|_| {
            Err(BridgeError::backend(
                "mpi",
                None,
                "the thread handing out inputs panicked",
            ))
        });
        own.and(served)
    })?;
    // every other rank has its last answer: an error now ends only this rank
    super::mpi::mark_released();
    let reports = reports.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(reports
        .into_iter()
        .zip(files)
        .map(|(r, (input, _))| {
            r.unwrap_or_else(|| FileReport {
                input: input.display().to_string(),
                error: Some("no rank reported it".into()),
                ..FileReport::default()
            })
        })
        .collect())
}

/// The summary of several inputs (one line or JSON entry per input); an error listing the
/// failed inputs when there are any.
fn summarise_files(job: &Job<'_>, reports: &[FileReport], start: Instant) -> Result<()> {
    #[cfg(feature = "mpi")]
    if super::mpi::place().is_some_and(|p| p.rank != 0) {
        return Ok(());
    }
    let g = job.g;
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| r.input.as_str())
        .collect();
    let secs = start.elapsed().as_secs_f64();
    let frames: usize = reports.iter().map(|r| r.frames).sum();
    let detections: usize = reports.iter().map(|r| r.detections).sum();
    if g.json {
        g.print_json(&serde_json::json!({
            "command": "detect",
            "method": method_name(job.args.method),
            "out_dir": job.args.out_dir.as_ref().map(|d| d.display().to_string()),
            "files": reports,
            "failed": failed,
            "frames": frames,
            "detections": detections,
            "seconds": secs,
        }))?;
    } else {
        g.note(format!(
            "detect: {} inputs ({} failed), {frames} frames, {detections} detections, {secs:.3} s, method {}",
            reports.len(),
            failed.len(),
            method_name(job.args.method)
        ));
        for r in reports {
            let by = |sep: &str| match r.rank {
                Some(k) => format!("rank {k}{sep}"),
                None => String::new(),
            };
            match &r.error {
                None => g.note(format!(
                    "  {} → {}: {} frames, {} detections, {}{}, {:.3} s",
                    r.input,
                    r.output,
                    r.frames,
                    r.detections,
                    by(" "),
                    r.device,
                    r.seconds
                )),
                Some(e) => g.note(format!(
                    "  {}: FAILED ({}{:.3} s): {e}",
                    r.input,
                    by(", "),
                    r.seconds
                )),
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BridgeError::InvalidInput(format!(
            "{} of {} inputs failed: {}",
            failed.len(),
            reports.len(),
            failed.join(", ")
        )))
    }
}

/// Detect one input into `output` on `place`.
fn detect_one(job: &Job<'_>, input: &Path, output: &Path, place: Where) -> Result<Done> {
    let args = job.args;
    let g = job.g;
    let det = job.det;
    let batch_size = job.batch_size;
    let start = Instant::now();
    let mut stream = MovieStream::open(input, job.chunk_frames)?.with_max_bytes(job.chunk_bytes);
    let total = stream.total_frames();
    let first = stream.next_chunk()?.ok_or_else(|| {
        BridgeError::InvalidInput(format!("{}: the movie has no frame", input.display()))
    })?;
    let (_, h, w) = first.dim();
    let dtype = first.dtype_name();
    let integer = matches!(first, Movie::U8(_) | Movie::U16(_));
    // the memory a batch needs depends on the back end (the CPU never holds the scale space):
    // detection checks it with the back ends it runs on, before the first batch
    let mut runner = match place {
        #[cfg(feature = "mpi")]
        Where::Ranks(m) => Runner::Several(m),
        Where::Arg(Some(devices)) => Runner::Several(Multi::new(&devices)?),
        Where::Rank(d, how) => Runner::One(Choice {
            reason: how,
            ..Choice::explicit(d)
        }),
        Where::Arg(None) => Runner::One(resolve(args.device.clone(), DETECT, || {
            match args.method {
                Method::Log => detect_estimate(&first, det),
                Method::Locate => {
                    let (cpu, note) = nominal_cpu();
                    Ok((detect_workload(&first, det), cpu, note))
                }
            }
        })?),
    };
    if let Runner::One(c) = &runner
        && let Some(note) = c.auto_note("detect")
    {
        g.note(note);
    }
    if args.requeue && matches!(runner, Runner::One(_)) {
        g.note("--requeue has no effect with one device: it hands a failed device's work to the others of --device a,b or all");
    }
    let policy = MultiPolicy {
        requeue_on_failure: args.requeue,
    };
    let progress = g.progress(total.unwrap_or(0) as u64, "frames");
    let mut out = match args.method {
        Method::Log => Output::log(output, args.refine)?,
        Method::Locate => Output::locate(output)?,
    };
    // The next chunk is read while this one is detected (one chunk ahead: memory stays bounded).
    let (n, t) = std::thread::scope(|scope| -> Result<(usize, usize)> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Movie>>(1);
        scope.spawn(move || {
            for chunk in stream {
                if tx.send(chunk).is_err() {
                    break;
                }
            }
        });
        let (mut n, mut frame0) = (0usize, 0usize);
        for chunk in std::iter::once(Ok(first)).chain(rx) {
            let chunk = chunk?;
            let len = chunk.len();
            if total.is_none() {
                progress.set_length((frame0 + len) as u64);
            }
            match job.locate {
                None => {
                    let mut ps = match &mut runner {
                        Runner::One(choice) => choice.run("detect", |d| {
                            let backend = backend_for(d)?;
                            det.detect_movie_with(&chunk, backend.as_ref(), |done| {
                                progress.set_position((frame0 + done) as u64)
                            })
                        }),
                        Runner::Several(m) => m.detect(det, &chunk, policy, |done| {
                            progress.set_position((frame0 + done) as u64)
                        }),
                    }
                    .map_err(|e| algorithms::detect::detector::in_movie_frames(e, frame0))?;
                    let f0 = u32::try_from(frame0)
                        .map_err(|_| BridgeError::InvalidInput("more than 2^32 frames".into()))?;
                    for p in &mut ps {
                        p.frame += f0;
                    }
                    out.particles(&ps)?;
                    n += ps.len();
                }
                Some(p) => {
                    let rows = match &mut runner {
                        Runner::One(choice) => choice.run("detect", |d| {
                            let backend = backend_for(d)?;
                            run_locate(p, batch_size, &chunk, frame0, backend.as_ref())
                        })?,
                        Runner::Several(m) => {
                            m.locate(p, batch_size, &chunk, frame0, policy, |done| {
                                progress.set_position((frame0 + done) as u64)
                            })?
                        }
                    };
                    out.features(&rows)?;
                    n += rows.len();
                }
            }
            frame0 += len;
            progress.set_position(frame0 as u64);
        }
        Ok((n, frame0))
    })?;
    out.finish()?;
    progress.finish_and_clear();
    if n == 0
        && args.method == Method::Log
        && det.threshold.is_some()
        && args.prescale == Prescale::Legacy
        && integer
    {
        g.note(format!(
            "note: no detection in {}. With --prescale legacy, integer pixels are divided by the dtype maximum, so \
             the absolute --threshold {} is rarely reached; try --threshold none --threshold-rel 0.2, or \
             --prescale none with a threshold in counts",
            input.display(),
            det.threshold.unwrap_or_default()
        ));
    }
    Ok(Done {
        frames: t,
        height: h,
        width: w,
        dtype,
        detections: n,
        seconds: start.elapsed().as_secs_f64(),
        runner,
    })
}

/// Where detection runs: one device (with how it was chosen) or several at once.
enum Runner {
    One(Choice),
    Several(Multi),
}

/// Several devices at once: their back ends (opened once), what each did so far, and which
/// are still working (a device that failed takes no later chunk). Under mpirun, rank 0's one
/// back end and the other ranks (`peers`, shares after the back ends', in rank order).
struct Multi {
    backends: Vec<Box<dyn DetectBackend>>,
    shares: Vec<DeviceShare>,
    alive: Vec<bool>,
    /// Shares are by MPI rank.
    ranked: bool,
    #[cfg(feature = "mpi")]
    peers: Vec<super::mpi::RankPeer>,
}

impl Multi {
    fn new(devices: &[bridge_core::Device]) -> Result<Multi> {
        let backends = devices
            .iter()
            .map(|&d| backend_for(d))
            .collect::<Result<Vec<_>>>()?;
        let shares = backends
            .iter()
            .map(|b| DeviceShare::new(b.device()))
            .collect();
        let alive = vec![true; devices.len()];
        Ok(Multi {
            backends,
            shares,
            alive,
            ranked: false,
            #[cfg(feature = "mpi")]
            peers: Vec::new(),
        })
    }

    /// Rank 0 on `device` and ranks 1..`size` (their devices are known once they report).
    #[cfg(feature = "mpi")]
    fn ranks(device: bridge_core::Device, size: usize) -> Result<Multi> {
        let mut m = Multi::new(&[device])?;
        m.ranked = true;
        m.peers = (1..size)
            .map(super::mpi::RankPeer::new)
            .collect::<Result<Vec<_>>>()?;
        m.shares
            .extend((1..size).map(|_| DeviceShare::new(bridge_core::Device::Cpu)));
        Ok(m)
    }

    /// The devices, comma-separated.
    fn device_text(&self) -> String {
        let names: Vec<String> = self.shares.iter().map(|s| s.device.to_string()).collect();
        names.join(",")
    }

    /// One line per device (or rank): its frames, batches, seconds, splits and failure.
    fn print_shares(&self, g: Global) {
        for (i, s) in self.shares.iter().enumerate() {
            g.note(format!(
                "  {}{}: {} frames in {} batches, {:.3} s{}{}",
                if self.ranked {
                    format!("rank {i} ")
                } else {
                    String::new()
                },
                s.device,
                s.frames,
                s.units,
                s.seconds,
                if s.splits > 0 {
                    format!(", {} batches split after running out of memory", s.splits)
                } else {
                    String::new()
                },
                s.error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(", stopped: {e}"))
            ));
        }
    }

    /// `locate` on one chunk on every device still working; rows numbered from `frame0`.
    fn locate(
        &mut self,
        p: &LocateParams,
        batch_size: usize,
        chunk: &Movie,
        frame0: usize,
        policy: MultiPolicy,
        progress: impl Fn(usize) + Sync,
    ) -> Result<Vec<(usize, Feature)>> {
        let live = self.live();
        #[cfg_attr(not(feature = "mpi"), allow(unused_mut))]
        let mut members: Vec<DetectMember<'_, Vec<Feature>>> = live
            .iter()
            .map(|&i| DetectMember::Local(self.backends[i].as_ref()))
            .collect();
        #[cfg(feature = "mpi")]
        if !self.peers.is_empty() {
            super::mpi::share_movie(Some(chunk))?;
            members.extend(self.peers.iter().map(|p| {
                DetectMember::Peer(p as &dyn algorithms::detect::FramePeer<Vec<Feature>>)
            }));
        }
        let out = locate_movie_members(chunk, p, &members, batch_size, policy, progress)?;
        self.record(&live, out.shares);
        Ok(out
            .features
            .into_iter()
            .enumerate()
            .flat_map(|(k, feats)| feats.into_iter().map(move |f| (frame0 + k, f)))
            .collect())
    }

    /// One chunk on every device; its frame numbers start at 0 (the caller shifts them).
    fn detect(
        &mut self,
        det: &LogDetector,
        chunk: &Movie,
        policy: MultiPolicy,
        progress: impl Fn(usize) + Sync,
    ) -> Result<Vec<Particle>> {
        let live = self.live();
        #[cfg(feature = "mpi")]
        if !self.peers.is_empty() {
            super::mpi::share_movie(Some(chunk))?;
            let mut members: Vec<DetectMember<'_>> = live
                .iter()
                .map(|&i| DetectMember::Local(self.backends[i].as_ref()))
                .collect();
            members.extend(
                self.peers
                    .iter()
                    .map(|p| DetectMember::Peer(p as &dyn algorithms::detect::FramePeer)),
            );
            let out = det.detect_movie_members(chunk, &members, policy, progress)?;
            self.record(&live, out.shares);
            return Ok(out.particles);
        }
        let refs: Vec<&dyn DetectBackend> =
            live.iter().map(|&i| self.backends[i].as_ref()).collect();
        let out = det.detect_movie_multi(chunk, &refs, policy, progress)?;
        self.record(&live, out.shares);
        Ok(out.particles)
    }

    /// The devices still working (a device that failed takes no later chunk).
    fn live(&self) -> Vec<usize> {
        (0..self.backends.len())
            .filter(|&i| self.alive[i])
            .collect()
    }

    /// A run's shares added to the totals: the first `live.len()` are the live devices', the
    /// rest the ranks' (after every local device's row).
    fn record(&mut self, live: &[usize], shares: Vec<DeviceShare>) {
        let n = live.len();
        for (k, s) in shares.into_iter().enumerate() {
            if k < n {
                self.alive[live[k]] = s.error.is_none();
                self.shares[live[k]].add(s);
            } else if let Some(share) = self.shares.get_mut(self.backends.len() + k - n) {
                share.device = s.device;
                share.add(s);
            }
        }
    }
}
