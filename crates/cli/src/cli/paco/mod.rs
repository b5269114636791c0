//! `arraybridge paco`: PACO exoplanet detection from FITS files.
//!
//! This module holds the flags and the run; `inputs` reads and checks the FITS inputs, `output`
//! finds the candidates and writes `candidates.csv`, the table and `snr.png`.

mod inputs;
mod output;

use std::path::PathBuf;
use std::time::Instant;

use algorithms::paco::{
    Center, EdgeRule, FluxOptions, MultiPolicy, PacoJob, PacoParams, PacoShare, PsfNorm, Rounding,
    Strategy, SubPixel, Variant, calibrated_snr, paco, paco_on, refine_peak, unbiased_flux,
};
#[cfg(feature = "mpi")]
use algorithms::paco::{Member, UnitPeer, paco_members};
use arraybridge::io::fits;
use bridge_core::{BridgeError, Device, Result};

use super::common::{Global, check_output_dir};
use super::device::{
    Choice, DeviceArg, PACO, check_explicit, nominal_cpu, paco_workload, parse_device_arg,
    rank_device, resolve,
};
use inputs::Inputs;
use output::{candidates, print_table, write_csv, write_png};

/// Stands for `mpi::Place` where the `mpi` feature is off (there are never ranks then).
#[cfg(not(feature = "mpi"))]
#[derive(Clone, Copy)]
struct NoRanks {
    size: usize,
    local_size: usize,
    local_rank: usize,
}

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

/// Run `arraybridge paco`.
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
        return serve(&args, *device);
    }
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
    let stages = g.stages();
    let Inputs { cube, angles, psf } = inputs::read(&args.cube, &args.angles, &args.psf, &stages)?;
    #[cfg(feature = "mpi")]
    if ranks.is_some() {
        share_inputs(Some((&cube, &angles, &psf)))?;
    }
    let (t, h, w) = cube.dim();
    let mut runner = match (several, ranks, rank_device) {
        (_, Some(p), Some((device, how))) => {
            stages.say(format!(
                "paco: {} MPI ranks ({} on this node); rank 0 on {device} ({how})",
                p.size, p.local_size
            ));
            Runner::Ranks(device, p.size)
        }
        (Some(devices), _, _) => Runner::Several(devices),
        _ => Runner::One(resolve(args.device.clone(), PACO, || {
            let (cpu, note) = nominal_cpu();
            Ok((paco_workload(t, h.max(w), radius), cpu, note))
        })?),
    };
    if let Runner::One(c) = &runner
        && let Some(note) = c.auto_note("paco")
    {
        stages.say(note);
    }
    if args.requeue && matches!(runner, Runner::One(_)) {
        stages.say("--requeue has no effect with one device: it hands a failed device's work to the others of --device a,b or all");
    }
    let first = runner.first();
    let mut params = params_for(&args, first)?;
    let subpixel = subpixel_name(params.subpixel);
    let edge = edge_name(params.edge);
    let mode = args.mode.name();
    stages.say(format!(
        "paco: {t} frames of {h}×{w}, radius {radius}, mode {mode}, sub-pixel {subpixel}, edge \
         {edge}, device {}",
        runner.name()
    ));
    let t1 = Instant::now();
    let policy = MultiPolicy {
        requeue_on_failure: args.requeue,
    };
    let mut shares: Option<Vec<PacoShare>> = None;
    let maps = match &mut runner {
        Runner::One(choice) => choice.run("paco", |d| {
            let p = PacoParams {
                device: d,
                ..params.clone()
            };
            paco(cube.view(), angles.view(), psf.view(), &p)
        }),
        #[cfg(feature = "mpi")]
        Runner::Ranks(device, n) => {
            let peers = (1..*n)
                .map(super::mpi::RankPeer::new)
                .collect::<Result<Vec<_>>>()?;
            let mut members = vec![Member::Local(*device)];
            members.extend(peers.iter().map(|p| Member::Peer(p as &dyn UnitPeer)));
            paco_members(
                cube.view(),
                angles.view(),
                psf.view(),
                &params,
                &members,
                policy,
            )
            .map(|m| {
                shares = Some(m.shares);
                m.maps
            })
        }
        #[cfg(not(feature = "mpi"))]
        Runner::Ranks(..) => Err(BridgeError::Unsupported(
            "MPI ranks need the `mpi` feature".into(),
        )),
        Runner::Several(devices) => paco_on(
            cube.view(),
            angles.view(),
            psf.view(),
            &params,
            devices,
            policy,
        )
        .map(|m| {
            shares = Some(m.shares);
            m.maps
        }),
    }
    .map_err(|e| match e {
        BridgeError::Unsupported(m) if params.subpixel == SubPixel::Spline5 => {
            BridgeError::Unsupported(format!(
                "--subpixel-method spline5: {m}; use table[:Q] or fft instead"
            ))
        }
        other => other,
    })?;
    params.device = runner.first();
    stages.say(format!(
        "paco: maps in {:.3} s (PSF divided by {:.6}{})",
        t1.elapsed().as_secs_f64(),
        maps.psf_norm_factor,
        maps.fwhm
            .map(|f| format!(", FWHM {f:.4} px"))
            .unwrap_or_default()
    ));
    let by_rank = matches!(runner, Runner::Ranks(..));
    for (i, s) in shares.iter().flatten().enumerate() {
        stages.say(format!(
            "  {}{}: {} tiles ({} statistics pixels), {:.3} s, {} up, {} down{}{}",
            if by_rank {
                format!("rank {i} ")
            } else {
                String::new()
            },
            s.device,
            s.units,
            s.pixels,
            s.seconds,
            bridge_core::units::format_bytes(s.bytes_up),
            bridge_core::units::format_bytes(s.bytes_down),
            if s.splits > 0 {
                format!(", {} tiles split after running out of memory", s.splits)
            } else {
                String::new()
            },
            s.error
                .as_ref()
                .map_or_else(String::new, |e| format!(", stopped: {e}"))
        ));
    }
    if !maps.snr.iter().any(|v| v.is_finite()) {
        eprintln!(
            "paco: warning: no output position has a valid trajectory (every map is NaN); \
             the frames may be too small for --radius {radius} with --edge {edge}"
        );
    }
    let (cy, cx) = match params.center {
        Center::At(y, x) => (y, x),
        _ => ((h / 2) as f64, (w / 2) as f64),
    };
    let mut cands = candidates(&maps, top, cy, cx);
    if args.refine {
        let n = cands.len();
        stages.say(format!(
            "paco: sub-pixel astrometry for {n} candidate(s) (0.25-px grid, CPU)"
        ));
        let mut rp = params.clone();
        rp.device = Device::Cpu;
        if rp.subpixel == SubPixel::Off {
            rp.subpixel = SubPixel::Table { q: 32 };
        }
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &rp)?;
        for c in cands.iter_mut() {
            match refine_peak(&job, (c.y as f64, c.x as f64), 0.25, 1.0) {
                Ok(pk) => {
                    c.y_sub = Some(pk.y);
                    c.x_sub = Some(pk.x);
                    c.snr_sub = Some(pk.snr);
                }
                Err(BridgeError::InvalidInput(m)) => g.note(format!(
                    "paco: candidate ({}, {}) not refined: {m}",
                    c.y, c.x
                )),
                Err(e) => return Err(e),
            }
        }
    }
    if args.flux {
        stages.say(format!(
            "paco: unbiased flux for {} candidate(s)",
            cands.len()
        ));
        let pos: Vec<(f64, f64)> = cands
            .iter()
            .map(|c| match (c.y_sub, c.x_sub) {
                (Some(y), Some(x)) => (y, x),
                _ => (c.y as f64, c.x as f64),
            })
            .collect();
        let est = unbiased_flux(
            cube.view(),
            angles.view(),
            psf.view(),
            &params,
            &pos,
            FluxOptions::default(),
        )?;
        for (c, e) in cands.iter_mut().zip(est) {
            c.unbiased_flux = Some(e.flux);
            c.unbiased_flux_err = Some(e.std);
        }
    }
    for (name, m) in [
        ("snr", &maps.snr),
        ("flux", &maps.flux),
        ("a", &maps.a),
        ("b", &maps.b),
    ] {
        fits::write_image(
            args.output.join(format!("{name}.fits")),
            &m.clone().into_dyn(),
        )?;
    }
    if args.calibrate {
        let strong: Vec<(usize, usize)> = cands
            .iter()
            .filter(|c| c.snr >= 5.0)
            .map(|c| (c.y, c.x))
            .collect();
        let radius = 2.0 * maps.fwhm.unwrap_or(4.0);
        let cal = calibrated_snr(&maps.snr, (cy, cx), &strong, radius);
        fits::write_image(args.output.join("snr_calibrated.fits"), &cal.into_dyn())?;
    }
    write_csv(
        &args.output.join("candidates.csv"),
        &cands,
        args.flux,
        args.refine,
    )?;
    let title = format!("PACO S/N  {mode}  SUB-PIXEL {subpixel}  EDGE {edge}");
    write_png(&args.output.join("snr.png"), &maps.snr, &cands, title)?;
    stages.finish();
    g.note(format!(
        "paco: wrote {} in {:.3} s total",
        args.output.display(),
        t0.elapsed().as_secs_f64()
    ));
    if g.json {
        g.print_json(&serde_json::json!({
            "command": "paco",
            "output": args.output.display().to_string(),
            "frames": t, "height": h, "width": w, "mode": mode,
            "radius": radius, "subpixel": subpixel, "edge": edge,
            "device": runner.name(),
            "device_reason": match &runner {
                Runner::One(c) => Some(c.reason.clone()),
                Runner::Several(_) | Runner::Ranks(..) => None,
            },
            "devices": shares.map(|v| v.iter().enumerate().map(|(i, s)| {
                let mut j = serde_json::to_value(s).unwrap_or_default();
                if by_rank {
                    j["rank"] = i.into();
                }
                j
            }).collect::<Vec<_>>()),
            "psf_norm_factor": maps.psf_norm_factor, "fwhm": maps.fwhm,
            "candidates": cands,
        }))?;
    } else {
        print_table(&cands, args.flux, args.refine);
    }
    Ok(())
}

/// A worker rank under mpirun: receive the inputs from rank 0 and compute the units it hands
/// out on `device`; writes nothing.
#[cfg(feature = "mpi")]
fn serve(args: &Args, device: Device) -> Result<()> {
    let (cube, angles, psf) = share_inputs(None)?;
    let params = params_for(args, device)?;
    algorithms::paco::serve_units(
        cube.view(),
        angles.view(),
        psf.view(),
        &params,
        device,
        &mut super::mpi::RootLink,
    )
}

/// Rank 0's inputs (`Some`, which it sends) or another rank's (`None`, which receives them): the
/// shapes, then the numbers.
#[cfg(feature = "mpi")]
fn share_inputs(
    ours: Option<(
        &ndarray::Array3<f64>,
        &ndarray::Array1<f64>,
        &ndarray::Array2<f64>,
    )>,
) -> Result<(
    ndarray::Array3<f64>,
    ndarray::Array1<f64>,
    ndarray::Array2<f64>,
)> {
    use super::mpi::{broadcast, try_zeros};
    let mut dims = [0u64; 6];
    if let Some((c, a, p)) = ours {
        let (t, h, w) = c.dim();
        let (ph, pw) = p.dim();
        dims = [t, h, w, a.len(), ph, pw].map(|n| n as u64);
    }
    broadcast(&mut dims);
    let d = dims.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let count = |a: usize, b: usize| {
        a.checked_mul(b)
            .ok_or_else(|| BridgeError::InvalidInput("inputs too large".into()))
    };
    let mut cube: Vec<f64> = match ours {
        Some((c, _, _)) => c.iter().copied().collect(),
        None => try_zeros(count(count(d[0], d[1])?, d[2])?, "--cube")?,
    };
    let mut angles: Vec<f64> = match ours {
        Some((_, a, _)) => a.to_vec(),
        None => try_zeros(d[3], "--angles")?,
    };
    let mut psf: Vec<f64> = match ours {
        Some((_, _, p)) => p.iter().copied().collect(),
        None => try_zeros(count(d[4], d[5])?, "--psf")?,
    };
    broadcast(&mut cube);
    broadcast(&mut angles);
    broadcast(&mut psf);
    let shape = |e: ndarray::ShapeError| BridgeError::InvalidInput(format!("inputs: {e}"));
    Ok((
        ndarray::Array3::from_shape_vec((d[0], d[1], d[2]), cube).map_err(shape)?,
        ndarray::Array1::from_vec(angles),
        ndarray::Array2::from_shape_vec((d[4], d[5]), psf).map_err(shape)?,
    ))
}

/// The parameters of the command line, computing on `device`.
fn params_for(args: &Args, device: Device) -> Result<PacoParams> {
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
        device,
        ..Default::default()
    })
}

/// Where PACO runs: one device (with how it was chosen), several at once, or one per MPI rank
/// (rank 0's device, number of ranks).
enum Runner {
    One(Choice),
    Several(Vec<Device>),
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    Ranks(Device, usize),
}

impl Runner {
    /// The device of `--flux` and `--refine`'s parameters: the one device, or the first.
    fn first(&self) -> Device {
        match self {
            Runner::One(c) => c.device,
            Runner::Ranks(d, _) => *d,
            Runner::Several(v) => v.first().copied().unwrap_or(Device::Cpu),
        }
    }

    /// `opencl:0` or `opencl:0,opencl:1`.
    fn name(&self) -> String {
        match self {
            Runner::One(c) => c.device.to_string(),
            Runner::Ranks(d, n) => format!("{d} and {} more MPI ranks", n - 1),
            Runner::Several(v) => v
                .iter()
                .map(Device::to_string)
                .collect::<Vec<_>>()
                .join(","),
        }
    }
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
