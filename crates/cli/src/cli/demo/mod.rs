//! `arraybridge demo`: the whole product in one command, on generated data.
//!
//! 1. A fluorescence-microscopy movie (Brownian particles with pixel-integrated Gaussian PSFs on
//!    a flat background, Poisson noise; [`algorithms::synth::movie::synthetic_movie`]) and an ADI cube
//!    (a quasi-static speckle halo that stays fixed on the detector, the sky — and one injected
//!    planet — turning with the parallactic angles, photon and read noise;
//!    [`algorithms::synth::adi::synthetic_adi_with_planet`]), both from a seeded generator so every
//!    run gives the same numbers.
//! 2. A device per stage: with `--device auto`, [`bridge_core::offload::decide`] over the devices
//!    of [`arraybridge::registry`] that the stage has a back end for (the choice and its reason
//!    are printed); an explicit device must exist and every stage must support it, otherwise
//!    the command fails before doing any work (never a silent CPU fallback). A list
//!    (`opencl:0,opencl:1`) or `all` shares detection's frames and PACO's units among the
//!    devices (the unbiased flux runs on the first), with the same results as one device.
//! 3. Detection (`blob_log` + sub-pixel refinement), linking (trackpy `link`) and PACO.
//! 4. Everything a user looks at, in the output directory: `detections.csv`, `tracks.csv`,
//!    `overlay.png`, `snr.png`, `snr.fits`, `summary.txt`, `summary.json`, and the generated
//!    inputs under `inputs/` (so `detect`, `track` and `paco` can be run on them by hand).
//!
//! This module holds the arguments and the run, stage by stage; `scenario` the fixed sizes and settings,
//! `planet` the planet recovery from PACO's maps, `particles` the detection/track tables,
//! `figures` the two PNGs, `inputs` the generated inputs, `report` the summary.

mod figures;
mod inputs;
mod particles;
mod planet;
mod report;
mod scenario;

use crate::cli::common::{outln, outp};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::common::{Global, Stages, check_output_dir};
use super::device::{
    Choice, DETECT, DeviceArg, PACO, check_explicit, choose, detect_workload, measure_cpu,
    open_all, paco_workload, parse_device_arg,
};
use crate::figures::{Canvas, SnrFigure};
use algorithms::detect::synth::{MatchStats, match_truth};
use algorithms::detect::{DetectBackend, LogDetector, Movie, MultiPolicy, Particle, RefineParams};
use algorithms::paco::{FluxOptions, PacoMaps, PacoParams, PsfNorm, unbiased_flux};
use algorithms::synth::adi::{AdiWithPlanet, synthetic_adi_with_planet};
use algorithms::synth::movie::{SyntheticMovie, synthetic_movie};
use algorithms::track::{LinkParams, LinkStats, link_particles};
use arraybridge::io::fits;
use bridge_core::{BridgeError, Device, Result};

use figures::{render_overlay, render_snr};
use inputs::{write_file, write_inputs};
use particles::{collect_tracks, position, write_detections};
use planet::{Recovered, recover_planet};
use report::Report;
use scenario::{ADI, FWHM, LINK, MATCH_RADIUS, MOVIE, adi_params};

/// Arguments of `arraybridge demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Device: `auto` (the offload decision, per stage, printed), `cpu`, `cuda:N` or `opencl:N`;
    /// or several at once (`opencl:0,opencl:1`, `all`): detection and PACO are shared by them.
    #[arg(long, default_value = "auto", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// Output folder (created if needed; replaced as a whole: a folder holding files the demo
    /// did not write there is refused).
    #[arg(
        short = 'o',
        long = "output",
        visible_alias = "out",
        default_value = "arraybridge-demo"
    )]
    pub output: PathBuf,
    /// Seed of the data generators (same seed, same data, same results).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Do not write the generated inputs (`inputs/movie.npy`, the ADI FITS files, the truth).
    #[arg(long)]
    pub no_inputs: bool,
}

/// The time of each stage, in order (the summary lists them).
type Timings = Vec<(&'static str, f64)>;

/// One track's points: frame, y, x.
type Track = Vec<(u32, f64, f64)>;

/// With several devices (`a,b` or `all`): the devices of detection and those of PACO.
type Lists = Option<(Vec<Device>, Vec<Device>)>;

/// Run `arraybridge demo`: the checks before any work, the generated data, a device per stage,
/// detection, tracking and PACO, the files and the summary.
pub fn run(args: Args, g: Global) -> Result<()> {
    let stages = g.stages();
    let t_all = Instant::now();
    let lists = check(&args)?;
    let out = args.output.clone();
    let mut timings: Timings = Vec::new();
    let (synth, adi) = generate(args.seed, &stages, &mut timings);
    let detector = LogDetector {
        refine: Some(RefineParams::default()),
        ..Default::default()
    };
    let (mut det_choice, mut paco_choice) = choose_devices(
        &args.device,
        &lists,
        &synth.movie,
        &detector,
        &stages,
        &mut timings,
    )?;
    let (nt, h, w) = synth.movie.dim();
    let (mut particles, detect_s, score) = detect(
        &detector,
        &synth,
        &lists,
        &mut det_choice,
        &stages,
        &mut timings,
    )?;
    let (link_stats, tracks) = track(&mut particles, &stages, &mut timings)?;
    let long_tracks = tracks.iter().filter(|t| t.len() * 10 >= nt * 9).count();
    let (maps, planet) = paco(&adi, &lists, &mut paco_choice, &stages, &mut timings)?;

    // Outputs: the whole set in a staging folder, put in place of the old one as a whole
    // (a folder of the user's files is refused by `check`)
    stages.say(format!("demo: writing {}", out.display()));
    let t = Instant::now();
    let staged = arraybridge::io::staged_dir::StagedDir::create(&out, "demo")?;
    let dir = staged.write_path().to_path_buf();
    let written = (|| {
        let overlay = write_particles(&dir, &synth.movie, &particles, &tracks)?;
        let snr_png = write_planet(&dir, &maps, &planet, &adi)?;
        if !args.no_inputs {
            write_inputs(&dir.join("inputs"), &synth.movie, &synth.truth, &adi)?;
        }
        Ok((overlay, snr_png))
    })();
    let (overlay, snr_png) = written.map_err(|e| staged.name_final(e))?;
    timings.push(("write outputs", t.elapsed().as_secs_f64()));
    timings.push(("total", t_all.elapsed().as_secs_f64()));

    let report = Report {
        seed: args.seed,
        requested: args.device.to_string(),
        det: &det_choice,
        paco: &paco_choice,
        movie: (nt, h, w),
        score: &score,
        detections: particles.len(),
        tracks: tracks.len(),
        long_tracks,
        largest_subnet: link_stats.largest_subnet,
        adi: &adi,
        planet: &planet,
        fwhm_used: maps.fwhm,
        psf_norm_factor: maps.psf_norm_factor,
        timings: &timings,
        frames_per_s: nt as f64 / detect_s.max(1e-9),
        overlay: (overlay.width(), overlay.height()),
        snr_png: &snr_png,
        out: &out,
        inputs: !args.no_inputs,
    };
    summary(&report, staged, &stages, g)
}

/// The checks before any work: an explicit device must run every stage; several devices (`a,b`
/// or `all`) are listed for detection and for PACO, each list checked for its stage; then the
/// output folder.
fn check(args: &Args) -> Result<Lists> {
    let request = &args.device;
    // Fail before any work when an explicit device cannot run every stage.
    if let DeviceArg::Explicit(d) = request {
        check_explicit(*d, &[DETECT, PACO])?;
    }
    // Several devices (`a,b` or `all`): detection's frames and PACO's units are shared by
    // them (the unbiased flux runs on the first); each list is checked for its stage.
    let lists = match request.devices(DETECT)? {
        Some(det) => Some((det, request.devices(PACO)?.unwrap_or_default())),
        None => None,
    };
    check_output_dir(&args.output, &[], &[], "--output")?;
    // the folder is replaced as a whole: never one holding files of the user's (or another
    // command's output)
    arraybridge::io::staged_dir::check_replaceable(&args.output, "--output")?;
    Ok(lists)
}

/// The generated data, each timed: the microscopy movie (and its truth) and the ADI cube with
/// its planet.
fn generate(seed: u64, stages: &Stages, timings: &mut Timings) -> (SyntheticMovie, AdiWithPlanet) {
    stages.say(format!(
        "demo: generating a {}-frame {}x{} movie of {} Brownian particles (seed {})",
        MOVIE.0, MOVIE.1, MOVIE.1, MOVIE.2, seed
    ));
    let t = Instant::now();
    let synth = synthetic_movie(MOVIE.0, MOVIE.1, MOVIE.2, MOVIE.3, seed);
    timings.push(("generate movie", t.elapsed().as_secs_f64()));

    stages.say(format!(
        "demo: generating a {}-frame {}x{} ADI cube with one planet",
        ADI.0, ADI.1, ADI.1
    ));
    let t = Instant::now();
    let adi = synthetic_adi_with_planet(ADI.0, ADI.1, seed, &adi_params());
    timings.push(("generate ADI cube", t.elapsed().as_secs_f64()));
    (synth, adi)
}

/// The device of detection + tracking and of PACO (timed, then said): the first of each list
/// with several devices, the explicit device, or `auto`'s offload decision for each stage's
/// workload (the CPU measured on the first frames of `movie`).
fn choose_devices(
    request: &DeviceArg,
    lists: &Lists,
    movie: &Movie,
    detector: &LogDetector,
    stages: &Stages,
    timings: &mut Timings,
) -> Result<(Choice, Choice)> {
    // Device choice, per stage.
    let t = Instant::now();
    let (det_choice, paco_choice) = match request {
        DeviceArg::Several(_) | DeviceArg::AllGpus => {
            let (det, paco) = lists.clone().unwrap_or_default();
            let of = |v: &[bridge_core::Device]| -> Result<Choice> {
                let first = *v.first().ok_or_else(|| {
                    BridgeError::invalid_argument("--device", "no device in the list")
                })?;
                let names: Vec<String> = v.iter().map(ToString::to_string).collect();
                Ok(Choice {
                    reason: format!(
                        "requested with --device {request}: shared by {} (first: {first})",
                        names.join(",")
                    ),
                    ..Choice::explicit(first)
                })
            };
            (of(&det)?, of(&paco)?)
        }
        DeviceArg::Explicit(d) => (Choice::explicit(*d), Choice::explicit(*d)),
        DeviceArg::Auto => {
            let (cpu, sample) = measure_cpu(movie, detector)?;
            let note = format!("measured on the first {sample} frames");
            let det_work = detect_workload(movie, detector);
            let paco_work = paco_workload(ADI.0, ADI.1, PacoParams::default().psf_rad);
            (
                choose(DETECT, &det_work, &cpu, &note),
                choose(PACO, &paco_work, &cpu, &note),
            )
        }
    };
    timings.push(("offload decision", t.elapsed().as_secs_f64()));
    stages.say(format!(
        "demo: detection + tracking on {}: {}",
        det_choice.device, det_choice.reason
    ));
    stages.say(format!(
        "demo: PACO on {}: {}",
        paco_choice.device, paco_choice.reason
    ));
    Ok((det_choice, paco_choice))
}

/// Detection (blob_log + sub-pixel refinement) on detection's device, or shared by the devices
/// of the list: the detections, the seconds it took and the score against the truth.
fn detect(
    detector: &LogDetector,
    synth: &SyntheticMovie,
    lists: &Lists,
    det_choice: &mut Choice,
    stages: &Stages,
    timings: &mut Timings,
) -> Result<(Vec<Particle>, f64, MatchStats)> {
    stages.say(format!(
        "demo: detecting (blob_log + refinement) on {}",
        det_choice.device
    ));
    let t = Instant::now();
    let particles = match lists {
        Some((det, _)) => {
            detector
                .detect_movie_on(&synth.movie, &open_all(det)?, MultiPolicy::default())?
                .particles
        }
        None => det_choice.run("demo", |d| -> Result<Vec<Particle>> {
            let backend: Box<dyn DetectBackend> =
                algorithms::detect::backend_for(&arraybridge::open_device(d)?)?;
            detector.detect_movie_with(&synth.movie, backend.as_ref(), |_| {})
        })?,
    };
    let detect_s = t.elapsed().as_secs_f64();
    timings.push(("detect", detect_s));
    let points: Vec<(u32, f64, f64)> = particles
        .iter()
        .map(|p| {
            let (y, x) = position(p);
            (p.frame, y, x)
        })
        .collect();
    let score = match_truth(&points, &synth.truth, MATCH_RADIUS);
    Ok((particles, detect_s, score))
}

/// Tracking (trackpy `link`, timed): each detection gets its track id; the linking's
/// statistics and each track's points.
fn track(
    particles: &mut [Particle],
    stages: &Stages,
    timings: &mut Timings,
) -> Result<(LinkStats, Vec<Track>)> {
    stages.say(format!("demo: linking {} detections", particles.len()));
    let t = Instant::now();
    let link_stats = link_particles(particles, &LinkParams::new(LINK.0, LINK.1))?;
    timings.push(("track", t.elapsed().as_secs_f64()));
    let tracks = collect_tracks(particles);
    Ok((link_stats, tracks))
}

/// PACO on its device, or shared by the devices of the list, then the planet recovered from
/// its maps and its unbiased flux (on PACO's device, the first of a list); each timed.
fn paco(
    adi: &AdiWithPlanet,
    lists: &Lists,
    paco_choice: &mut Choice,
    stages: &Stages,
    timings: &mut Timings,
) -> Result<(PacoMaps, Recovered)> {
    stages.say(format!("demo: PACO on {}", paco_choice.device));
    let params = PacoParams {
        psf_norm: PsfNorm::Fwhm(FWHM),
        ..Default::default()
    };
    let t = Instant::now();
    let maps = match lists {
        Some((_, devices)) => {
            algorithms::paco::paco_on(
                adi.cube.view(),
                adi.angles.view(),
                adi.psf.view(),
                &params,
                &open_all(devices)?,
                algorithms::paco::MultiPolicy::default(),
            )?
            .maps
        }
        None => paco_choice.run("demo", |d| {
            algorithms::paco::paco_on_device(
                &arraybridge::open_device(d)?,
                adi.cube.view(),
                adi.angles.view(),
                adi.psf.view(),
                &params,
            )
        })?,
    };
    timings.push(("PACO", t.elapsed().as_secs_f64()));
    let mut planet = recover_planet(&maps, &adi.planet, adi.centre);
    let t = Instant::now();
    let est = unbiased_flux(
        adi.cube.view(),
        adi.angles.view(),
        adi.psf.view(),
        &params,
        &[(planet.y, planet.x)],
        FluxOptions::default(),
    )?;
    if let Some(e) = est.first() {
        planet.unbiased = Some((e.flux / maps.psf_norm_factor, e.std / maps.psf_norm_factor));
    }
    timings.push(("PACO unbiased flux", t.elapsed().as_secs_f64()));
    Ok((maps, planet))
}

/// `detections.csv`, `tracks.csv` and `overlay.png` in `out`; returns the overlay.
fn write_particles(
    out: &Path,
    movie: &Movie,
    particles: &[Particle],
    tracks: &[Track],
) -> Result<Canvas> {
    write_detections(&out.join("detections.csv"), particles, false)?;
    write_detections(&out.join("tracks.csv"), particles, true)?;
    let overlay = render_overlay(movie, particles, tracks)?;
    overlay.write_png(out.join("overlay.png"))?;
    Ok(overlay)
}

/// `snr.png` (the recovered planet and the truth marked) and `snr.fits` in `out`; returns the
/// figure.
fn write_planet(
    out: &Path,
    maps: &PacoMaps,
    planet: &Recovered,
    adi: &AdiWithPlanet,
) -> Result<SnrFigure> {
    let snr_png = render_snr(&maps.snr, planet, &adi.planet)?;
    snr_png.write_png(out.join("snr.png"))?;
    fits::write_image(out.join("snr.fits"), &maps.snr.clone().into_dyn())?;
    Ok(snr_png)
}

/// `summary.txt` and `summary.json` in `out`, then one of them on stdout (the JSON with
/// `--json`).
fn summary(
    report: &Report<'_>,
    staged: arraybridge::io::staged_dir::StagedDir,
    stages: &Stages,
    g: Global,
) -> Result<()> {
    let text = report.text();
    let json = report.json();
    let dir = staged.write_path();
    let json_text = serde_json::to_string_pretty(&json)
        .map_err(|e| BridgeError::InvalidInput(format!("summary.json: {e}").into()))?;
    write_file(&dir.join("summary.txt"), text.as_bytes())
        .and_then(|()| write_file(&dir.join("summary.json"), json_text.as_bytes()))
        .map_err(|e| staged.name_final(e))?;
    staged.commit()?;
    stages.finish();
    if g.json {
        outln!("{json_text}")?;
    } else {
        outp!("{text}")?;
    }
    Ok(())
}
