//! `arraybridge paco`: PACO exoplanet detection from FITS files.
//!
//! This module holds the flags and the run, step by step; `inputs` reads and checks the FITS
//! inputs, `runner` chooses the devices and computes the maps, `refine` adds `--refine` and
//! `--flux` to the candidates, `output` finds the candidates and writes the maps,
//! `candidates.csv`, `snr.png` and the table or JSON; `workers` (feature `mpi`) shares the
//! inputs under mpirun and is the run of the ranks other than 0.

mod inputs;
mod output;
mod refine;
mod runner;
#[cfg(feature = "mpi")]
mod workers;

use crate::cli::common::to_stderr;
use std::path::PathBuf;
use std::time::Instant;

use algorithms::paco::{
    Center, EdgeRule, PacoParams, PsfNorm, Rounding, Strategy, SubPixel, Variant,
};
use bridge_core::{BridgeError, Device, Result};

use super::common::{Global, check_output_dir};
use super::device::{DeviceArg, PACO, check_explicit, parse_device_arg, rank_device};
use output::{candidates, summary, write_files};
use refine::{flux, refine};
use runner::Runner;

/// Stands for `mpi::Place` where the `mpi` feature is off (there are never ranks then).
#[cfg(not(feature = "mpi"))]
#[derive(Clone, Copy)]
struct NoRanks {
    size: usize,
    local_size: usize,
    local_rank: usize,
}

/// This process's place among the MPI ranks.
#[cfg(feature = "mpi")]
type Ranks = super::mpi::Place;
/// This process's place among the MPI ranks: never any without the `mpi` feature.
#[cfg(not(feature = "mpi"))]
type Ranks = NoRanks;

/// Arguments of `arraybridge paco`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// ADI cube (T, H, W) in FITS.
    #[arg(long)]
    pub cube: PathBuf,
    /// Derotation angles in degrees, (T,) or (T, 1), in FITS.
    #[arg(long)]
    pub angles: PathBuf,
    /// Off-axis PSF (odd, centred) in FITS.
    #[arg(long)]
    pub psf: PathBuf,
    /// Output folder (created if needed; checked before the inputs are read; never holds an
    /// input that would be overwritten).
    #[arg(short = 'o', long = "output", visible_alias = "out")]
    pub output: PathBuf,
    /// Patch radius in pixels (psf_rad); 4 gives 49-pixel patches.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=MAX_RADIUS))]
    pub radius: u64,
    /// Covariance formulas.
    #[arg(long, value_enum, default_value_t = Mode::Paper)]
    pub mode: Mode,
    /// Sub-pixel PSF templates; shorthand for `--subpixel-method table:32`.
    #[arg(long)]
    pub subpixel: bool,
    /// Shorthand for `--subpixel-method fft` (wins over --subpixel when both are given).
    #[arg(long)]
    pub exact_subpixel: bool,
    /// Sub-pixel PSF templates (implies sub-pixel): `table[:Q]` = a table of exact FFT shifts on
    /// a 1/Q-pixel grid blended bilinearly (Q in 1..=1024, default 32); `fft` = VIP's exact FFT
    /// shift for every (φ0, frame) (slow); `spline5` = interpolating quintic B-spline.
    #[arg(
        long,
        value_name = "table[:Q]|fft|spline5",
        value_parser = parse_subpixel_method,
        conflicts_with_all = ["subpixel", "exact_subpixel"]
    )]
    pub subpixel_method: Option<SubPixel>,
    /// Which pixels may hold statistics.
    #[arg(long, value_enum, default_value_t = Edge::Box)]
    pub edge: Edge,
    /// Round trajectory positions to the nearest pixel instead of truncating (VIP truncates).
    #[arg(long)]
    pub nearest: bool,
    /// PSF FWHM in pixels (default: fitted with an Airy model).
    #[arg(long)]
    pub fwhm: Option<f64>,
    /// Divide the PSF by exactly this factor instead of the aperture flux.
    #[arg(long, conflicts_with = "fwhm")]
    pub psf_norm_factor: Option<f64>,
    /// Star centre `y,x` (default N/2 for even N, (N−1)/2 for odd N).
    #[arg(long, value_parser = parse_center, allow_hyphen_values = true)]
    pub center: Option<(f64, f64)>,
    /// Reproduce VIP's half-pixel centre shift for odd frame sizes (compatibility only).
    #[arg(long, conflicts_with = "center")]
    pub vip_odd_center: bool,
    /// Unbiased flux (paper Algorithm 3) of every listed candidate (`--top`).
    #[arg(long)]
    pub flux: bool,
    /// Sub-pixel astrometry of every listed candidate (`--top`): the S/N on a 0.25-px grid
    /// within 1 px of each, along exact trajectories (on the CPU, with the run's sub-pixel
    /// templates, or a q = 32 table if the run has none). Adds y_sub, x_sub, snr_sub; `--flux`
    /// then uses the refined positions.
    #[arg(long)]
    pub refine: bool,
    /// How the statistics are computed.
    #[arg(long, value_enum, default_value_t = StatsStrategy::Fast)]
    pub stats_strategy: StatsStrategy,
    /// Upper bound of one statistics band, MiB (bands split further on allocation failure).
    #[arg(long, default_value_t = 256)]
    pub tile_mb: usize,
    /// Also write `snr_calibrated.fits`: S/N divided by a robust per-annulus spread (1.4826·MAD in
    /// 1-px annuli, excluding 2 FWHM around the listed candidates above S/N 5).
    #[arg(long)]
    pub calibrate: bool,
    /// Number of candidates to list.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub top: u64,
    /// Device: `auto` (the offload decision, printed), `cpu`, `cuda:N` or `opencl:N`; or several
    /// at once, `opencl:0,opencl:1` or `all` (every GPU): tiles of statistics rows (or of
    /// trajectory pixels with sub-pixel templates) go to whichever device is free, the maps are
    /// the same as on one device. `--flux` and `--refine` run on the first device.
    #[arg(long, default_value = "auto", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// With several devices: a device that fails hands its tiles to the others (reported)
    /// instead of failing the run. Out-of-memory is always handled (the tile is split).
    #[arg(long)]
    pub requeue: bool,
}

/// Largest `--radius`: a patch of radius R has about πR² pixels and every pixel of the map
/// solves a system of that size, so radii past the PSF core (a few pixels) are mistakes. The
/// memory check of the job catches large radii that do not fit well before this bound.
pub const MAX_RADIUS: u64 = 512;

/// Every file `paco` writes in its output folder.
pub const OUTPUT_FILES: [&str; 7] = [
    "snr.fits",
    "flux.fits",
    "a.fits",
    "b.fits",
    "snr_calibrated.fits",
    "candidates.csv",
    "snr.png",
];

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The paper's covariance formulas.
    Paper,
    /// VIP 2.1.1's formulas, quirks included (the golden files).
    Vip,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Paper => "paper",
            Mode::Vip => "vip",
        }
    }
}

/// `--stats-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsStrategy {
    /// Precomputed matched filter (more memory, fastest).
    Fast,
    /// Statistics on demand in bounded bands (`--tile-mb`).
    Full,
}

/// `--edge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Edge {
    /// VIP's rule (all goldens): a (2R+3)-wide box about the pixel fits in the frame.
    Box,
    /// The patch disk fits in the frame: a one-pixel wider valid field.
    Disk,
}

impl From<Edge> for EdgeRule {
    fn from(e: Edge) -> Self {
        match e {
            Edge::Box => EdgeRule::Box,
            Edge::Disk => EdgeRule::Disk,
        }
    }
}

/// Largest `Q` of `--subpixel-method table:Q`.
const MAX_TABLE_Q: usize = 1024;

/// `--subpixel-method`: `table` (q = 32), `table:Q`, `fft` or `spline5` (case-insensitive).
fn parse_subpixel_method(s: &str) -> std::result::Result<SubPixel, String> {
    let t = s.trim().to_ascii_lowercase();
    let (name, q) = match t.split_once(':') {
        Some((n, q)) => (n.trim(), Some(q.trim())),
        None => (t.as_str(), None),
    };
    match (name, q) {
        ("table", None) => Ok(SubPixel::Table { q: 32 }),
        ("table", Some(q)) => match q.parse::<usize>() {
            Ok(n) if (1..=MAX_TABLE_Q).contains(&n) => Ok(SubPixel::Table { q: n }),
            _ => Err(format!(
                "table:Q needs Q in 1..={MAX_TABLE_Q} (grid subdivisions per pixel), got {q:?}"
            )),
        },
        ("fft", None) => Ok(SubPixel::VipFft),
        ("spline5", None) => Ok(SubPixel::Spline5),
        ("fft" | "spline5", Some(_)) => Err(format!("{name} takes no :Q (only table does)")),
        _ => Err(format!(
            "unknown sub-pixel method {s:?}: expected table, table:Q, fft or spline5"
        )),
    }
}

/// The sub-pixel mode as `--subpixel-method` spells it (`off` without sub-pixel templates).
fn subpixel_name(s: SubPixel) -> String {
    match s {
        SubPixel::Off => "off".into(),
        SubPixel::Table { q } => format!("table:{q}"),
        SubPixel::VipFft => "fft".into(),
        SubPixel::Spline5 => "spline5".into(),
    }
}

/// The edge rule as `--edge` spells it.
fn edge_name(e: EdgeRule) -> &'static str {
    match e {
        EdgeRule::Box => "box",
        EdgeRule::Disk => "disk",
    }
}

/// The sub-pixel mode of the command line: `--subpixel-method`, else the shorthands
/// (`--exact-subpixel` = fft wins over `--subpixel` = table:32), else off.
fn subpixel_mode(args: &Args) -> SubPixel {
    match (args.subpixel_method, args.exact_subpixel, args.subpixel) {
        (Some(m), _, _) => m,
        (None, true, _) => SubPixel::VipFft,
        (None, false, true) => SubPixel::Table { q: 32 },
        (None, false, false) => SubPixel::Off,
    }
}

fn parse_center(s: &str) -> std::result::Result<(f64, f64), String> {
    let mut it = s.split(',').map(|p| p.trim().parse::<f64>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(y)), Some(Ok(x)), None) if y.is_finite() && x.is_finite() => Ok((y, x)),
        _ => Err(format!("expected y,x (two numbers), got {s:?}")),
    }
}

/// What a run computes, as its progress line, `snr.png`'s caption and the JSON name it.
struct Settings {
    /// Frames, height and width of the cube.
    dims: (usize, usize, usize),
    /// `--radius`.
    radius: usize,
    /// `--mode`.
    mode: &'static str,
    /// The sub-pixel mode, as `--subpixel-method` spells it.
    subpixel: String,
    /// The edge rule, as `--edge` spells it.
    edge: &'static str,
}

/// Run `arraybridge paco`: where it runs (MPI ranks or not) and the checks before any input is
/// read, the inputs, the device choice, the maps, the candidates, the files and the summary.
pub fn run(args: Args, g: Global) -> Result<()> {
    let t0 = Instant::now();
    #[cfg(feature = "mpi")]
    let ranks = super::mpi::place();
    #[cfg(not(feature = "mpi"))]
    let ranks: Option<NoRanks> = None;
    // under mpirun: one device per rank, from its node-local rank
    let rank_device = match ranks {
        Some(p) => Some(rank_device(&args.device, PACO, p.local_rank)?),
        None => None,
    };
    #[cfg(feature = "mpi")]
    if let (Some(p), Some((device, _))) = (ranks, &rank_device)
        && p.rank != 0
    {
        return workers::serve(&args, *device);
    }
    let (several, radius, top) = check(&args, ranks)?;
    let stages = g.stages();
    let inputs = inputs::read(&args.cube, &args.angles, &args.psf, &stages)?;
    #[cfg(feature = "mpi")]
    if ranks.is_some() {
        workers::share_inputs(Some((&inputs.cube, &inputs.angles, &inputs.psf)))?;
    }
    let (t, h, w) = inputs.cube.dim();
    let mut runner = Runner::choose(
        &args,
        &stages,
        several,
        ranks,
        rank_device,
        (t, h, w),
        radius,
    )?;
    let params = params_for(&args)?;
    let settings = Settings {
        dims: (t, h, w),
        radius,
        mode: args.mode.name(),
        subpixel: subpixel_name(params.subpixel),
        edge: edge_name(params.edge),
    };
    let Settings {
        mode,
        ref subpixel,
        edge,
        ..
    } = settings;
    stages.say(format!(
        "paco: {t} frames of {h}×{w}, radius {radius}, mode {mode}, sub-pixel {subpixel}, edge \
         {edge}, device {}",
        runner.name()
    ));
    let t1 = Instant::now();
    let (maps, shares) = runner.maps(&inputs, &params, args.requeue)?;
    runner.report(&stages, t1, &maps, shares.as_deref());
    if !maps.snr.iter().any(|v| v.is_finite()) {
        to_stderr(format_args!(
            "paco: warning: every map is NaN: either no output position has a valid \
             trajectory (the frames may be too small for --radius {radius} with --edge \
             {edge}), or the statistics are degenerate everywhere (a constant or all-zero \
             cube, or a cube or PSF whose values' squares leave the doubles' range)"
        ));
    }
    let (cy, cx) = match params.center {
        Center::At(y, x) => (y, x),
        _ => ((h / 2) as f64, (w / 2) as f64),
    };
    let mut cands = candidates(&maps, top, cy, cx);
    if args.refine {
        refine(&mut cands, &inputs, &params, &stages, g)?;
    }
    if args.flux {
        flux(&mut cands, &inputs, &params, &stages)?;
    }
    // the whole set in a staging folder, then put in place of the old one as a whole
    let staged = arraybridge::io::staged_dir::StagedDir::create(&args.output, "paco")?;
    write_files(
        &args,
        staged.write_path(),
        &maps,
        &cands,
        (cy, cx),
        &settings,
    )
    .map_err(|e| staged.name_final(e))?;
    staged.commit()?;
    stages.finish();
    g.note(format!(
        "paco: wrote {} in {:.3} s total",
        args.output.display(),
        t0.elapsed().as_secs_f64()
    ));
    summary(&args, g, &settings, &runner, shares, &maps, &cands)
}

/// The checks before any input is read: the devices of `--device a,b` or `all` (not under
/// mpirun), an explicit device (it must exist), `--radius` and `--top` as sizes, then the output
/// folder. Returns the devices (when several), the radius and the number of candidates.
fn check(args: &Args, ranks: Option<Ranks>) -> Result<(Option<Vec<Device>>, usize, usize)> {
    let several = match ranks {
        Some(_) => None,
        None => args.device.devices(PACO)?,
    };
    if let (None, DeviceArg::Explicit(d)) = (ranks, &args.device) {
        check_explicit(*d, &[PACO])?;
    }
    let radius = usize::try_from(args.radius)
        .map_err(|_| BridgeError::invalid_argument("--radius", "too large"))?;
    let top = usize::try_from(args.top)
        .map_err(|_| BridgeError::invalid_argument("--top", "too large"))?;
    check_output_dir(
        &args.output,
        &OUTPUT_FILES,
        &[&args.cube, &args.angles, &args.psf],
        "--output",
    )?;
    // the folder is replaced as a whole: never one holding files of the user's
    arraybridge::io::staged_dir::check_replaceable(&args.output, "--output")?;
    Ok((several, radius, top))
}

/// The parameters of the command line, computing on `device`.
fn params_for(args: &Args) -> Result<PacoParams> {
    let radius = usize::try_from(args.radius)
        .map_err(|_| BridgeError::invalid_argument("--radius", "too large"))?;
    let variant = match args.mode {
        Mode::Paper => Variant::Paper,
        Mode::Vip => Variant::Vip,
    };
    Ok(PacoParams {
        psf_rad: radius,
        variant,
        rounding: if args.nearest {
            Rounding::Nearest
        } else {
            Rounding::Trunc
        },
        subpixel: subpixel_mode(args),
        edge: args.edge.into(),
        psf_norm: match (args.psf_norm_factor, args.fwhm) {
            (Some(f), _) => PsfNorm::Factor(f),
            (None, Some(f)) => PsfNorm::Fwhm(f),
            (None, None) => PsfNorm::FitAiry,
        },
        center: match (args.center, args.vip_odd_center) {
            (Some((y, x)), _) => Center::At(y, x),
            (None, true) => Center::VipOdd,
            (None, false) => Center::Auto,
        },
        strategy: match args.stats_strategy {
            StatsStrategy::Fast => Strategy::Fast,
            StatsStrategy::Full => Strategy::Full,
        },
        max_tile_bytes: args
            .tile_mb
            .checked_mul(1 << 20)
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                BridgeError::invalid_argument("--tile-mb", "must be a positive number of MiB")
            })?,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> std::result::Result<Args, clap::Error> {
        let base = [
            "paco", "--cube", "c", "--angles", "a", "--psf", "p", "-o", "o",
        ];
        Cmd::try_parse_from(base.iter().chain(extra)).map(|c| c.args)
    }

    fn mode(extra: &[&str]) -> SubPixel {
        subpixel_mode(&parse(extra).unwrap())
    }

    #[test]
    fn subpixel_methods_parse() {
        assert_eq!(mode(&[]), SubPixel::Off);
        assert_eq!(
            mode(&["--subpixel-method", "table"]),
            SubPixel::Table { q: 32 }
        );
        assert_eq!(
            mode(&["--subpixel-method", "table:16"]),
            SubPixel::Table { q: 16 }
        );
        assert_eq!(
            mode(&["--subpixel-method=TABLE:1"]),
            SubPixel::Table { q: 1 }
        );
        assert_eq!(
            mode(&["--subpixel-method", "table:1024"]),
            SubPixel::Table { q: 1024 }
        );
        assert_eq!(mode(&["--subpixel-method", "fft"]), SubPixel::VipFft);
        assert_eq!(mode(&["--subpixel-method", "spline5"]), SubPixel::Spline5);
        // The shorthands, as before.
        assert_eq!(mode(&["--subpixel"]), SubPixel::Table { q: 32 });
        assert_eq!(mode(&["--exact-subpixel"]), SubPixel::VipFft);
        assert_eq!(mode(&["--subpixel", "--exact-subpixel"]), SubPixel::VipFft);
        for m in [
            SubPixel::Off,
            SubPixel::Table { q: 8 },
            SubPixel::VipFft,
            SubPixel::Spline5,
        ] {
            let name = subpixel_name(m);
            if m != SubPixel::Off {
                assert_eq!(parse_subpixel_method(&name), Ok(m), "{name}");
            }
        }
    }

    #[test]
    fn bad_subpixel_methods_are_clap_errors() {
        for (bad, needle) in [
            ("table:0", "1..=1024"),
            ("table:1025", "1..=1024"),
            ("table:-3", "1..=1024"),
            ("table:", "1..=1024"),
            ("table:abc", "1..=1024"),
            ("fft:4", "takes no :q"),
            ("spline3", "unknown sub-pixel method"),
            ("off", "unknown sub-pixel method"),
            ("", "unknown sub-pixel method"),
        ] {
            let e = parse(&["--subpixel-method", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
            let msg = e.to_string().to_lowercase();
            assert!(msg.contains(needle), "{bad}: {msg}");
            assert!(msg.contains("--subpixel-method"), "{msg}");
        }
        // A method and a shorthand together conflict, whatever they say.
        for extra in [
            ["--subpixel", "--subpixel-method", "table:8"],
            ["--exact-subpixel", "--subpixel-method", "fft"],
        ] {
            let e = parse(&extra).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        }
    }

    #[test]
    fn edge_rules_parse() {
        assert_eq!(parse(&[]).unwrap().edge, Edge::Box);
        assert_eq!(parse(&["--edge", "disk"]).unwrap().edge, Edge::Disk);
        assert_eq!(EdgeRule::from(Edge::Disk), EdgeRule::Disk);
        assert_eq!(EdgeRule::from(Edge::Box), EdgeRule::Box);
        assert_eq!(edge_name(EdgeRule::Disk), "disk");
        let e = parse(&["--edge", "circle"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
    }
}
