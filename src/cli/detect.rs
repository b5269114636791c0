//! `arraybridge detect`: particle detection (LoG `blob_log` or trackpy `locate`) on a movie.
//!
//! Output CSV (coordinates are (row, column), 0-based, pixel centres at integers):
//! * `--method log`: `frame,y,x,sigma,response`, plus with `--refine`
//!   `y_refined,x_refined,mass,size,ecc,signal,background`;
//! * `--method locate`: `frame,y,x,mass,size,ecc,signal,raw_mass,ep`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use algorithms::detect::{
    Accumulate, DetectBackend, Feature, LocateParams, LogDetector, Movie, Particle, Prescale,
    RefineParams, backend_for,
};
use bridge_core::{BridgeError, Device, Result};

use arraybridge::io::image::read_movie;

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

fn parse_prescale(s: &str) -> std::result::Result<Prescale, String> {
    s.parse::<Prescale>().map_err(|e| e.to_string())
}

/// Arguments of `arraybridge detect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input movie: multi-page TIFF (u8, u16, f32), .npy (2-D or 3-D), or a folder of
    /// single-frame TIFF/PNG files (name order).
    pub input: PathBuf,
    /// Output CSV.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
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

    /// Device: cpu, opencl:N, cuda:N or auto (the first available GPU, else cpu).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Frames per batch (a device launch / a parallel CPU chunk); does not change results.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// No progress bar and no summary line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

fn pick_backend(device: &str) -> Result<Box<dyn DetectBackend>> {
    if device.trim().eq_ignore_ascii_case("auto") {
        for d in [Device::Cuda(0), Device::OpenCl(0)] {
            if let Ok(b) = backend_for(d) {
                return Ok(b);
            }
        }
        return backend_for(Device::Cpu);
    }
    let d: Device = device.parse()?;
    backend_for(d)
}

struct Progress {
    enabled: bool,
    total: usize,
    start: Instant,
}

impl Progress {
    fn new(quiet: bool, total: usize) -> Self {
        Progress {
            enabled: !quiet && std::io::stderr().is_terminal(),
            total,
            start: Instant::now(),
        }
    }
    fn update(&self, done: usize) {
        if !self.enabled {
            return;
        }
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let width = 30;
        let filled = (done * width).checked_div(self.total).unwrap_or(width);
        eprint!(
            "\r[{}{}] {done}/{} frames, {:.1} frames/s",
            "#".repeat(filled),
            " ".repeat(width - filled.min(width)),
            self.total,
            done as f64 / secs
        );
        if done >= self.total {
            eprintln!();
        }
    }
}

fn create_output(path: &PathBuf) -> Result<std::io::BufWriter<std::fs::File>> {
    let f =
        std::fs::File::create(path).map_err(|e| BridgeError::io(path.display().to_string(), e))?;
    Ok(std::io::BufWriter::new(f))
}

fn write_log_csv(path: &PathBuf, ps: &[Particle], refine: bool) -> Result<()> {
    let name = path.display().to_string();
    let mut w = create_output(path)?;
    let io = |e| BridgeError::io(name.clone(), e);
    let mut header = String::from("frame,y,x,sigma,response");
    if refine {
        header.push_str(",y_refined,x_refined,mass,size,ecc,signal,background");
    }
    writeln!(w, "{header}").map_err(io)?;
    for p in ps {
        write!(w, "{},{},{},{},{}", p.frame, p.y, p.x, p.sigma, p.response).map_err(io)?;
        if let Some(r) = &p.refined {
            write!(
                w,
                ",{},{},{},{},{},{},{}",
                r.y, r.x, r.mass, r.size, r.ecc, r.signal, r.background
            )
            .map_err(io)?;
        }
        writeln!(w).map_err(io)?;
    }
    w.flush().map_err(io)
}

fn write_locate_csv(path: &PathBuf, rows: &[(usize, Feature)]) -> Result<()> {
    let name = path.display().to_string();
    let mut w = create_output(path)?;
    let io = |e| BridgeError::io(name.clone(), e);
    writeln!(w, "frame,y,x,mass,size,ecc,signal,raw_mass,ep").map_err(io)?;
    for (t, f) in rows {
        writeln!(
            w,
            "{t},{},{},{},{},{},{},{},{}",
            f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep
        )
        .map_err(io)?;
    }
    w.flush().map_err(io)
}

fn run_locate(
    args: &Args,
    movie: &Movie,
    backend: &dyn DetectBackend,
    progress: &Progress,
) -> Result<Vec<(usize, Feature)>> {
    let diameter = args.diameter.ok_or_else(|| {
        BridgeError::invalid_argument(
            "diameter",
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
    let frames = movie.frames();
    let mut out = Vec::new();
    let mut done = 0;
    for (bi, batch) in frames.chunks(args.batch_size).enumerate() {
        let res = backend.locate_batch(batch, &p)?;
        for (k, feats) in res.into_iter().enumerate() {
            out.extend(feats.into_iter().map(|f| (bi * args.batch_size + k, f)));
        }
        done += batch.len();
        progress.update(done);
    }
    Ok(out)
}

/// Run `arraybridge detect`.
pub fn run(args: Args) -> Result<()> {
    if args.batch_size == 0 {
        return Err(BridgeError::invalid_argument(
            "batch-size",
            "must be at least 1",
        ));
    }
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
        batch_size: args.batch_size,
        refine: args.refine.then(RefineParams::default),
        accumulate: if args.fast {
            Accumulate::F32
        } else {
            Accumulate::F64
        },
    };
    if args.method == Method::Log {
        det.params().validate()?;
    }
    let backend = pick_backend(&args.device)?;
    let start = Instant::now();
    let movie = read_movie(&args.input)?;
    let (t, h, w) = movie.dim();
    let progress = Progress::new(args.quiet, t);
    let n = match args.method {
        Method::Log => {
            let ps = det.detect_movie_with(&movie, backend.as_ref(), |d| progress.update(d))?;
            write_log_csv(&args.output, &ps, args.refine)?;
            if ps.is_empty()
                && det.threshold.is_some()
                && args.prescale == Prescale::Legacy
                && matches!(movie, Movie::U8(_) | Movie::U16(_))
            {
                eprintln!(
                    "note: no detection. With --prescale legacy, integer pixels are divided by the dtype maximum, so \
                     the absolute --threshold {} is rarely reached; try --threshold none --threshold-rel 0.2, or \
                     --prescale none with a threshold in counts",
                    det.threshold.unwrap_or_default()
                );
            }
            ps.len()
        }
        Method::Locate => {
            let rows = run_locate(&args, &movie, backend.as_ref(), &progress)?;
            write_locate_csv(&args.output, &rows)?;
            rows.len()
        }
    };
    if !args.quiet {
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "detect: {t} frames of {h}x{w} {}, {n} detections, {secs:.3} s ({:.1} frames/s), method {}, device {}",
            movie.dtype_name(),
            t as f64 / secs.max(1e-9),
            match args.method {
                Method::Log => "log",
                Method::Locate => "locate",
            },
            backend.device()
        );
    }
    Ok(())
}
