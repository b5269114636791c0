//! The flags of `arraybridge detect` ([`Args`], [`Method`], [`MaybeF64`]) and their value
//! parsers.

use std::path::PathBuf;

use algorithms::detect::Prescale;

use super::super::device::{DeviceArg, parse_device_arg};

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

/// How the planes of an input group: `--axes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Axes {
    /// From the file: volumes when a TIFF says so (OME `SizeZ` > 1, an ImageJ hyperstack of
    /// slices at several time points; ImageJ's plain `slices=N` stack stays a movie, as ImageJ
    /// saves time-lapses that way too) and for a 4-D `.npy` `(T, Z, Y, X)`; anything else is
    /// a movie of 2-D frames.
    Auto,
    /// A movie of 2-D frames.
    Tyx,
    /// One volume: every plane of the file.
    Zyx,
    /// A movie of volumes (Z from the TIFF's axes or the `.npy`'s shape).
    Tzyx,
}

/// `--diameter`, `--separation`, `--noise-size`, `--smoothing-size`: one value, or one per
/// axis of a volume (`7,5,5` for z, y, x).
#[derive(Debug, Clone, PartialEq)]
pub struct PerAxis<T>(pub Vec<T>);

impl<T: Copy + std::fmt::Debug> PerAxis<T> {
    /// The value of 2-D frames: [`BridgeError::InvalidInput`](bridge_core::BridgeError) for one
    /// per axis.
    pub fn scalar(&self, flag: &str) -> bridge_core::Result<T> {
        match self.0.as_slice() {
            [v] => Ok(*v),
            _ => Err(bridge_core::BridgeError::invalid_argument(
                flag,
                format!(
                    "a value per axis ({:?}) is for volumes (--axes zyx or tzyx, or a z-stack); \
                     2-D frames take one value",
                    self.0
                ),
            )),
        }
    }
}

/// One value or several separated by commas (numbers; NaN is refused here, other values
/// where the algorithm checks its parameters).
fn parse_per_axis<T: std::str::FromStr + PartialOrd + Default>(
    s: &str,
) -> std::result::Result<PerAxis<T>, String> {
    let v = s
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<T>()
                .map_err(|_| format!("expected a value or values separated by commas, got {s:?}"))
        })
        .collect::<std::result::Result<Vec<T>, String>>()?;
    // NaN is neither below nor at least the default (0)
    if v.iter().any(|x| x.partial_cmp(&T::default()).is_none()) {
        return Err(format!("{s:?} is not finite"));
    }
    Ok(PerAxis(v))
}

/// `--min-sigma`/`--max-sigma`: one σ, or one per axis of a volume (`1,2,2` for z, y, x).
#[derive(Debug, Clone, PartialEq)]
pub struct SigmaArg(pub Vec<f64>);

impl SigmaArg {
    /// The σ of 2-D frames: [`BridgeError::InvalidInput`] for a σ per axis.
    pub fn scalar(&self, flag: &str) -> bridge_core::Result<f64> {
        match self.0.as_slice() {
            [s] => Ok(*s),
            _ => Err(bridge_core::BridgeError::invalid_argument(
                flag,
                format!(
                    "a σ per axis ({:?}) is for volumes (--axes zyx or tzyx, or a z-stack); 2-D \
                     frames take one σ",
                    self.0
                ),
            )),
        }
    }
}

fn parse_sigma(s: &str) -> std::result::Result<SigmaArg, String> {
    let v = s
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .map_err(|_| format!("expected a number or numbers separated by commas, got {s:?}"))
        })
        .collect::<std::result::Result<Vec<f64>, String>>()?;
    if v.iter().any(|x| !x.is_finite()) {
        return Err(format!("{s:?} is not finite"));
    }
    Ok(SigmaArg(v))
}

fn parse_prescale(s: &str) -> std::result::Result<Prescale, String> {
    s.parse::<Prescale>().map_err(|e| e.to_string())
}

/// Arguments of `arraybridge detect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Input movies: multi-page TIFF (u8, u16, f32), .npy (2-D, 3-D, or 4-D volumes), or a folder of
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
    /// Detection method. A flag of the other method (`--diameter` with the LoG, `--max-sigma`
    /// with `locate`) is refused, not ignored.
    #[arg(long, value_enum, default_value_t = Method::Log)]
    pub method: Method,
    /// How planes group: `auto` (a TIFF's OME axes or ImageJ hyperstack axes, a 4-D .npy as
    /// T, Z, Y, X; an ImageJ stack of slices only stays a movie), `tyx` (a
    /// movie of frames), `zyx` (one volume), `tzyx` (volumes). Volumes are detected in 3-D
    /// (scikit-image's n-D blob_log, or trackpy's 3-D locate with `--method locate`; on the CPU
    /// or the one device `--device` names) and written as `frame,z,y,x,sigma` rows
    /// (`sigma_z,sigma_y,sigma_x` with a σ per axis), or `frame` and trackpy's columns.
    #[arg(long, value_enum, default_value_t = Axes::Auto)]
    pub axes: Axes,

    /// [log] Smallest σ (blob_log default 1); for volumes one per axis too (`1,2,2`: z, y, x).
    #[arg(long, value_parser = parse_sigma, default_value = "1")]
    pub min_sigma: SigmaArg,
    /// [log] Largest σ (blob_log default 50); for volumes one per axis too.
    #[arg(long, value_parser = parse_sigma, default_value = "50")]
    pub max_sigma: SigmaArg,
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
    /// [log] Precision the LoG filters in f32 (faster; cube within ~1e-7 of SciPy's, so only
    /// responses within that distance of the threshold can change). Default: exact f64.
    #[arg(long)]
    pub fast: bool,
    /// Not a mode: any value (`f16` included) is a usage error explaining why (float64 by
    /// default, float32 with `--fast`; f16 was left out, docs/perf.md "Precision").
    #[arg(long, hide = true, value_parser = parse_precision)]
    pub precision: Option<String>,

    /// [locate] Feature diameter (odd); required with --method locate. For volumes one per
    /// axis too (`9,5,5`: z, y, x).
    #[arg(long, value_parser = parse_per_axis::<usize>)]
    pub diameter: Option<PerAxis<usize>>,
    /// [locate] Minimum integrated brightness (strict `mass > minmass`).
    #[arg(long, default_value_t = 0.0)]
    pub minmass: f64,
    /// [locate] Maximum radius of gyration.
    #[arg(long)]
    pub maxsize: Option<f64>,
    /// [locate] Minimum separation (default diameter + 1); for volumes one per axis too.
    #[arg(long, value_parser = parse_per_axis::<f64>)]
    pub separation: Option<PerAxis<f64>>,
    /// [locate] Gaussian lowpass width (default 1); for volumes one per axis too.
    #[arg(long, value_parser = parse_per_axis::<f64>, default_value = "1")]
    pub noise_size: PerAxis<f64>,
    /// [locate] Boxcar background width (default diameter); for volumes one per axis too.
    #[arg(long, value_parser = parse_per_axis::<usize>)]
    pub smoothing_size: Option<PerAxis<usize>>,
    /// [locate] Percentile of non-zero pixels a maximum must exceed (default 64).
    #[arg(long, default_value_t = 64.0)]
    pub percentile: f64,
    /// [locate] Keep only the N brightest features per frame, in ascending mass (trackpy's
    /// `topn`: 1 keeps the first of the brightest; 0 keeps every feature, by mass).
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

impl Args {
    /// The first flag given (different from its default) that the other method than
    /// `--method` reads: `detect` refuses it rather than ignore it (a `--diameter` with the
    /// LoG, a `--max-sigma` with `locate`). A flag given at its default value is not seen.
    pub fn other_methods_flag(&self) -> Option<&'static str> {
        let d = Self::defaults()?;
        let log_only = [
            (self.min_sigma != d.min_sigma, "--min-sigma"),
            (self.max_sigma != d.max_sigma, "--max-sigma"),
            (self.num_sigma != d.num_sigma, "--num-sigma"),
            (self.threshold != d.threshold, "--threshold"),
            (self.threshold_rel != d.threshold_rel, "--threshold-rel"),
            (self.overlap != d.overlap, "--overlap"),
            (self.log_scale, "--log-scale"),
            (self.exclude_border != d.exclude_border, "--exclude-border"),
            (self.prescale != d.prescale, "--prescale"),
            (self.refine, "--refine"),
            (self.fast, "--fast"),
        ];
        let locate_only = [
            (self.diameter.is_some(), "--diameter"),
            (self.minmass != d.minmass, "--minmass"),
            (self.maxsize.is_some(), "--maxsize"),
            (self.separation.is_some(), "--separation"),
            (self.noise_size != d.noise_size, "--noise-size"),
            (self.smoothing_size.is_some(), "--smoothing-size"),
            (self.percentile != d.percentile, "--percentile"),
            (self.topn.is_some(), "--topn"),
            (self.no_preprocess, "--no-preprocess"),
            (self.invert, "--invert"),
            (self.locate_threshold.is_some(), "--locate-threshold"),
        ];
        let other: &[(bool, &'static str)] = match self.method {
            Method::Log => &locate_only,
            Method::Locate => &log_only,
        };
        other
            .iter()
            .find_map(|&(given, flag)| given.then_some(flag))
    }

    /// The flags as clap gives them when only an input is named: their defaults, from the
    /// `#[arg]` attributes above (not written out a second time).
    fn defaults() -> Option<Args> {
        #[derive(clap::Parser)]
        struct OnlyAnInput {
            #[command(flatten)]
            args: Args,
        }
        <OnlyAnInput as clap::Parser>::try_parse_from(["detect", "-"])
            .ok()
            .map(|o| o.args)
    }
}
