//! `arraybridge demo`: the whole product in one command, on generated data.
//!
//! 1. A fluorescence-microscopy movie (Brownian particles with pixel-integrated Gaussian PSFs on
//!    a flat background, Poisson noise; [`algorithms::detect::synth::synthetic_movie`]) and an ADI
//!    cube (a quasi-static speckle halo that stays fixed on the detector, the sky — and one
//!    injected planet — turning with the parallactic angles, photon and read noise), both from a
//!    seeded generator so every run gives the same numbers.
//! 2. A device per stage: with `--device auto`, [`bridge_core::offload::decide`] over the devices
//!    of [`arraybridge::registry`] that the stage has a back end for (the choice and its reason
//!    are printed); an explicit device must exist and every stage must support it, otherwise
//!    the command fails before doing any work (never a silent CPU fallback).
//! 3. Detection (`blob_log` + sub-pixel refinement), linking (trackpy `link`) and PACO.
//! 4. Everything a user looks at, in the output directory: `detections.csv`, `tracks.csv`,
//!    `overlay.png`, `snr.png`, `snr.fits`, `summary.txt`, `summary.json`, and the generated
//!    inputs under `inputs/` (so `detect`, `track` and `paco` can be run on them by hand).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::common::{Global, check_output_dir};
use super::device::{
    Choice, DETECT, DeviceArg, PACO, check_explicit, choose, detect_workload, measure_cpu,
    paco_workload, parse_device_arg,
};
use algorithms::detect::synth::{SplitMix, TruthPoint, erf, match_truth, synthetic_movie};
use algorithms::detect::{DetectBackend, LogDetector, Movie, Particle, RefineParams};
use algorithms::paco::{FluxOptions, PacoMaps, PacoParams, PsfNorm, unbiased_flux};
use algorithms::track::{LinkParams, link_particles};
use arraybridge::io::draw::{self, Canvas, GREEN, Marker, RED, SnrFigure, SnrMapOptions, WHITE};
use arraybridge::io::{fits, npy};
use bridge_core::{BridgeError, Result};
use ndarray::{Array1, Array2, Array3};

/// Arguments of `arraybridge demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Device: `auto` (the offload decision, per stage, printed), `cpu`, `cuda:N` or `opencl:N`.
    #[arg(long, default_value = "auto", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// Output folder (created if needed; existing demo files are replaced).
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

/// Movie: frames, frame size, particles, Brownian step (σ per axis per frame, px).
const MOVIE: (usize, usize, usize, f64) = (100, 256, 50, 1.0);
/// A detection matches a true particle within this distance (px).
const MATCH_RADIUS: f64 = 2.0;
/// Linking: search range (px) and memory (frames).
const LINK: (f64, usize) = (5.0, 2);
/// ADI cube: frames and frame size.
const ADI: (usize, usize) = (48, 80);
/// PSF full width at half maximum (px).
const FWHM: f64 = 4.0;
/// Planet: separation (px), position angle (degrees counter-clockwise from +x in array
/// coordinates, in the derotated frame) and contrast (planet / star peak).
const PLANET: (f64, f64, f64) = (18.0, 30.0, 6e-3);
/// Peak of the unocculted star in the PSF frame (counts).
const STAR_PEAK: f64 = 20_000.0;
/// Total field rotation over the sequence (degrees).
const ROTATION: f64 = 80.0;
/// Inner working angle (px): the planet search and the false-alarm statistics ignore the
/// coronagraph-dominated centre.
const IWA: f64 = 2.0 * FWHM;
/// Canvas scale of the overlay (canvas pixels per image pixel).
const OVERLAY_SCALE: usize = 2;
/// Largest side of the S/N map in the PNG (canvas pixels).
const SNR_PNG_SIDE: usize = 480;

/// Run `arraybridge demo`.
pub fn run(args: Args, g: Global) -> Result<()> {
    let t_all = Instant::now();
    let request = args.device;
    // Fail before any work when an explicit device cannot run every stage.
    if let DeviceArg::Explicit(d) = request {
        check_explicit(d, &[DETECT, PACO])?;
    }
    let out = args.output.clone();
    check_output_dir(&out, &[], &[], "--output")?;
    let mut timings: Vec<(&'static str, f64)> = Vec::new();

    g.note(format!(
        "demo: generating a {}-frame {}x{} movie of {} Brownian particles (seed {})",
        MOVIE.0, MOVIE.1, MOVIE.1, MOVIE.2, args.seed
    ));
    let t = Instant::now();
    let synth = synthetic_movie(MOVIE.0, MOVIE.1, MOVIE.2, MOVIE.3, args.seed);
    timings.push(("generate movie", t.elapsed().as_secs_f64()));

    g.note(format!(
        "demo: generating a {}-frame {}x{} ADI cube with one planet",
        ADI.0, ADI.1, ADI.1
    ));
    let t = Instant::now();
    let adi = synthetic_adi_with_planet(ADI.0, ADI.1, args.seed);
    timings.push(("generate ADI cube", t.elapsed().as_secs_f64()));

    // Device choice, per stage.
    let t = Instant::now();
    let detector = LogDetector {
        refine: Some(RefineParams::default()),
        ..Default::default()
    };
    let (mut det_choice, mut paco_choice) = match request {
        DeviceArg::Explicit(d) => (Choice::explicit(d), Choice::explicit(d)),
        DeviceArg::Auto => {
            let (cpu, sample) = measure_cpu(&synth.movie, &detector)?;
            let note = format!("measured on the first {sample} frames");
            let det_work = detect_workload(&synth.movie, &detector);
            let paco_work = paco_workload(ADI.0, ADI.1, PacoParams::default().psf_rad);
            (
                choose(DETECT, &det_work, &cpu, &note),
                choose(PACO, &paco_work, &cpu, &note),
            )
        }
    };
    timings.push(("offload decision", t.elapsed().as_secs_f64()));
    g.note(format!(
        "demo: detection + tracking on {}: {}",
        det_choice.device, det_choice.reason
    ));
    g.note(format!(
        "demo: PACO on {}: {}",
        paco_choice.device, paco_choice.reason
    ));

    // Detection.
    let (nt, h, w) = synth.movie.dim();
    g.note(format!(
        "demo: detecting (blob_log + refinement) on {}",
        det_choice.device
    ));
    let t = Instant::now();
    let mut particles = det_choice.run("demo", |d| -> Result<Vec<Particle>> {
        let backend: Box<dyn DetectBackend> = algorithms::detect::backend_for(d)?;
        detector.detect_movie_with(&synth.movie, backend.as_ref(), |_| {})
    })?;
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

    // Tracking.
    g.note(format!("demo: linking {} detections", particles.len()));
    let t = Instant::now();
    let link_stats = link_particles(&mut particles, &LinkParams::new(LINK.0, LINK.1))?;
    timings.push(("track", t.elapsed().as_secs_f64()));
    let tracks = collect_tracks(&particles);
    let long_tracks = tracks.iter().filter(|t| t.len() * 10 >= nt * 9).count();

    // PACO.
    g.note(format!("demo: PACO on {}", paco_choice.device));
    let mut params = PacoParams {
        psf_norm: PsfNorm::Fwhm(FWHM),
        device: paco_choice.device,
        ..Default::default()
    };
    let t = Instant::now();
    let maps = paco_choice.run("demo", |d| {
        let p = PacoParams {
            device: d,
            ..params.clone()
        };
        algorithms::paco::paco(adi.cube.view(), adi.angles.view(), adi.psf.view(), &p)
    })?;
    params.device = paco_choice.device;
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

    // Outputs.
    g.note(format!("demo: writing {}", out.display()));
    let t = Instant::now();
    write_detections(&out.join("detections.csv"), &particles, false)?;
    write_detections(&out.join("tracks.csv"), &particles, true)?;
    let overlay = render_overlay(&synth.movie, &particles, &tracks)?;
    overlay.write_png(out.join("overlay.png"))?;
    let snr_png = render_snr(&maps.snr, &planet, &adi.planet)?;
    snr_png.write_png(out.join("snr.png"))?;
    fits::write_image(out.join("snr.fits"), &maps.snr.clone().into_dyn())?;
    if !args.no_inputs {
        write_inputs(&out.join("inputs"), &synth.movie, &synth.truth, &adi)?;
    }
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
    let text = report.text();
    let json = report.json();
    write_file(&out.join("summary.txt"), text.as_bytes())?;
    let json_text = serde_json::to_string_pretty(&json)
        .map_err(|e| BridgeError::InvalidInput(format!("summary.json: {e}")))?;
    write_file(&out.join("summary.json"), json_text.as_bytes())?;
    if g.json {
        println!("{json_text}");
    } else {
        print!("{text}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Synthetic ADI data

/// The injected planet.
#[derive(Debug, Clone, Copy)]
struct PlanetTruth {
    /// Row in the derotated frame.
    y: f64,
    /// Column in the derotated frame.
    x: f64,
    separation: f64,
    angle_deg: f64,
    contrast: f64,
}

/// A generated ADI sequence.
struct AdiData {
    cube: Array3<f64>,
    angles: Array1<f64>,
    psf: Array2<f64>,
    planet: PlanetTruth,
    centre: (f64, f64),
}

/// Separable Gaussian smoothing of an `n × n` field (zero outside).
fn blur(field: &[f64], n: usize, sigma: f64) -> Vec<f64> {
    let r = (3.0 * sigma).ceil() as isize;
    let k: Vec<f64> = (-r..=r)
        .map(|d| (-(d * d) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let pass = |src: &[f64], along_rows: bool| {
        let mut dst = vec![0.0; n * n];
        for y in 0..n {
            for x in 0..n {
                let mut acc = 0.0;
                for (i, kv) in k.iter().enumerate() {
                    let o = i as isize - r;
                    let (yy, xx) = if along_rows {
                        (y as isize, x as isize + o)
                    } else {
                        (y as isize + o, x as isize)
                    };
                    if yy >= 0 && xx >= 0 && (yy as usize) < n && (xx as usize) < n {
                        acc += kv * src[yy as usize * n + xx as usize];
                    }
                }
                dst[y * n + x] = acc;
            }
        }
        dst
    };
    pass(&pass(field, true), false)
}

/// A unit-mean-intensity complex speckle field (`re`, `im`), grains of about the PSF size.
fn speckle_field(rng: &mut SplitMix, n: usize, sigma: f64) -> (Vec<f64>, Vec<f64>) {
    let mut white = || (0..n * n).map(|_| rng.normal()).collect::<Vec<f64>>();
    let (re, im) = (blur(&white(), n, sigma), blur(&white(), n, sigma));
    let mean = re.iter().zip(&im).map(|(a, b)| a * a + b * b).sum::<f64>() / (n * n) as f64;
    let k = 1.0 / mean.max(1e-300).sqrt();
    (
        re.iter().map(|v| v * k).collect(),
        im.iter().map(|v| v * k).collect(),
    )
}

/// Fraction of a unit Gaussian of width `sigma` centred at `c` that falls in pixel `p`.
fn pixel_weight(p: f64, c: f64, sigma: f64) -> f64 {
    let k = sigma * std::f64::consts::SQRT_2;
    0.5 * (erf((p + 0.5 - c) / k) - erf((p - 0.5 - c) / k))
}

/// Add a pixel-integrated Gaussian of peak `peak` (of the continuous profile) at `(cy, cx)`.
fn add_gaussian(img: &mut [f64], n: usize, cy: f64, cx: f64, sigma: f64, peak: f64) {
    let total = peak * 2.0 * std::f64::consts::PI * sigma * sigma;
    let r = (5.0 * sigma).ceil() as isize;
    let (iy, ix) = (cy.round() as isize, cx.round() as isize);
    for y in (iy - r).max(0)..=(iy + r).min(n as isize - 1) {
        let wy = pixel_weight(y as f64, cy, sigma);
        for x in (ix - r).max(0)..=(ix + r).min(n as isize - 1) {
            img[y as usize * n + x as usize] += total * wy * pixel_weight(x as f64, cx, sigma);
        }
    }
}

/// Where a source at separation `sep` and position angle `pa` (degrees, derotated frame) about
/// `centre` appears in a raw frame of derotation angle `angle` (PACO's convention).
fn frame_position(centre: (f64, f64), sep: f64, pa: f64, angle: f64) -> (f64, f64) {
    let th = (pa - angle).to_radians();
    (centre.0 + sep * th.sin(), centre.1 + sep * th.cos())
}

/// A coronagraphic ADI sequence: a stellar halo and speckles fixed on the detector (a static
/// speckle field plus a slowly evolving one, 35 % in amplitude), one planet of [`PLANET`] whose
/// position turns with the parallactic angles, Poisson photon noise and 3 counts of read noise.
/// The angles follow a meridian transit (faster rotation mid-sequence), [`ROTATION`] degrees in
/// all. Frame `ℓ` shows the derotated position `(r, θ0)` at `(r, θ0 − angle_ℓ)` about the
/// centre, PACO's convention.
fn synthetic_adi_with_planet(t: usize, n: usize, seed: u64) -> AdiData {
    let mut rng = SplitMix::new(seed ^ 0xAD1_C0BE);
    let sigma = FWHM / (8.0 * std::f64::consts::LN_2).sqrt();
    let c = (n / 2) as f64;
    let half = ROTATION / 2.0;
    let angles = Array1::from_shape_fn(t, |i| {
        let u = i as f64 / (t.max(2) - 1) as f64 - 0.5;
        half * (2.4 * u).tanh() / 1.2f64.tanh()
    });
    let (sre, sim) = speckle_field(&mut rng, n, sigma);
    let (are, aim) = speckle_field(&mut rng, n, sigma);
    let (bre, bim) = speckle_field(&mut rng, n, sigma);
    // Halo envelope: bright near the star, coronagraph mask inside ~1 FWHM.
    let envelope: Vec<f64> = (0..n * n)
        .map(|i| {
            let r = ((i / n) as f64 - c).hypot((i % n) as f64 - c);
            let mask = 1.0 - (-(r / FWHM).powi(2)).exp();
            STAR_PEAK * 0.04 * mask / (1.0 + (r / 6.0).powi(2)).powf(1.2)
        })
        .collect();
    let (sep, pa, contrast) = PLANET;
    let planet = PlanetTruth {
        y: c + sep * pa.to_radians().sin(),
        x: c + sep * pa.to_radians().cos(),
        separation: sep,
        angle_deg: pa,
        contrast,
    };
    let mut data = vec![0.0; t * n * n];
    for (f, frame) in data.chunks_mut(n * n).enumerate() {
        let phase = std::f64::consts::PI * f as f64 / t as f64;
        let (ca, sa) = (0.35 * phase.cos(), 0.35 * phase.sin());
        let mut img: Vec<f64> = (0..n * n)
            .map(|i| {
                let re = sre[i] + ca * are[i] + sa * bre[i];
                let im = sim[i] + ca * aim[i] + sa * bim[i];
                envelope[i] * (re * re + im * im) / (1.0 + 0.35 * 0.35) + 0.3 * envelope[i] + 20.0
            })
            .collect();
        let (py, px) = frame_position((c, c), sep, pa, angles[f]);
        add_gaussian(&mut img, n, py, px, sigma, contrast * STAR_PEAK);
        for (o, v) in frame.iter_mut().zip(img) {
            *o = rng.poisson(v) + 3.0 * rng.normal();
        }
    }
    let cube = Array3::from_shape_vec((t, n, n), data).unwrap_or_else(|_| Array3::zeros((t, n, n)));
    let psf_n = 21;
    let mut psf = vec![0.0; psf_n * psf_n];
    let pc = (psf_n / 2) as f64;
    add_gaussian(&mut psf, psf_n, pc, pc, sigma, STAR_PEAK);
    let psf = Array2::from_shape_vec((psf_n, psf_n), psf)
        .unwrap_or_else(|_| Array2::zeros((psf_n, psf_n)));
    AdiData {
        cube,
        angles,
        psf,
        planet,
        centre: (c, c),
    }
}

/// What PACO found.
#[derive(Debug, Clone, Copy)]
struct Recovered {
    /// Pixel of the S/N maximum (row, column).
    pixel: (usize, usize),
    /// S/N-weighted centroid of the 3×3 neighbourhood (row, column).
    y: f64,
    x: f64,
    snr: f64,
    /// b/a at the maximum, divided by the PSF normalisation factor: the contrast estimate
    /// (biased low, see `unbiased_flux`).
    contrast: f64,
    /// Distance to the true position (px).
    error: f64,
    /// Largest S/N farther than 2 FWHM from the maximum (outside the inner working angle).
    false_alarm_snr: f64,
    /// Contrast and its standard deviation from the unbiased flux (paper Algorithm 3).
    unbiased: Option<(f64, f64)>,
}

/// The S/N maximum outside the inner working angle ([`IWA`]) about `centre`.
fn recover_planet(maps: &PacoMaps, truth: &PlanetTruth, centre: (f64, f64)) -> Recovered {
    let snr = &maps.snr;
    let (h, w) = snr.dim();
    let outside = |y: usize, x: usize| (y as f64 - centre.0).hypot(x as f64 - centre.1) >= IWA;
    let mut best = ((0usize, 0usize), f64::NEG_INFINITY);
    for ((y, x), &v) in snr.indexed_iter() {
        if v.is_finite() && v > best.1 && outside(y, x) {
            best = ((y, x), v);
        }
    }
    let ((by, bx), bv) = best;
    let (mut sw, mut sy, mut sx) = (0.0, 0.0, 0.0);
    for y in by.saturating_sub(1)..(by + 2).min(h) {
        for x in bx.saturating_sub(1)..(bx + 2).min(w) {
            let v = snr[[y, x]];
            if v.is_finite() && v > 0.0 {
                sw += v;
                sy += v * y as f64;
                sx += v * x as f64;
            }
        }
    }
    let (y, x) = if sw > 0.0 {
        (sy / sw, sx / sw)
    } else {
        (by as f64, bx as f64)
    };
    let mut fa = f64::NEG_INFINITY;
    for ((yy, xx), &v) in snr.indexed_iter() {
        let d = (yy as f64 - by as f64).hypot(xx as f64 - bx as f64);
        if v.is_finite() && d > 2.0 * FWHM && outside(yy, xx) {
            fa = fa.max(v);
        }
    }
    Recovered {
        pixel: (by, bx),
        y,
        x,
        snr: bv,
        contrast: maps.flux.get((by, bx)).copied().unwrap_or(f64::NAN) / maps.psf_norm_factor,
        error: (y - truth.y).hypot(x - truth.x),
        false_alarm_snr: fa,
        unbiased: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Outputs

fn position(p: &Particle) -> (f64, f64) {
    p.refined.map_or((p.y, p.x), |r| (r.y, r.x))
}

/// Track id → its points `(frame, y, x)` in frame order, tracks in id order.
fn collect_tracks(ps: &[Particle]) -> Vec<Vec<(u32, f64, f64)>> {
    let mut by_id: std::collections::BTreeMap<i64, Vec<(u32, f64, f64)>> = Default::default();
    for p in ps {
        if let Some(id) = p.id.filter(|&i| i >= 0) {
            let (y, x) = position(p);
            by_id.entry(id).or_default().push((p.frame, y, x));
        }
    }
    by_id
        .into_values()
        .map(|mut v| {
            v.sort_by_key(|q| q.0);
            v
        })
        .collect()
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| BridgeError::io(path.display().to_string(), e))
}

/// The `arraybridge detect --refine` columns, plus `particle` for the tracks.
fn write_detections(path: &Path, ps: &[Particle], with_id: bool) -> Result<()> {
    let name = path.display().to_string();
    let io = |e| BridgeError::io(name.clone(), e);
    let f = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(f);
    write!(
        w,
        "frame,y,x,sigma,response,y_refined,x_refined,mass,size,ecc,signal,background"
    )
    .map_err(io)?;
    writeln!(w, "{}", if with_id { ",particle" } else { "" }).map_err(io)?;
    for p in ps {
        write!(w, "{},{},{},{},{}", p.frame, p.y, p.x, p.sigma, p.response).map_err(io)?;
        match &p.refined {
            Some(r) => write!(
                w,
                ",{},{},{},{},{},{},{}",
                r.y, r.x, r.mass, r.size, r.ecc, r.signal, r.background
            ),
            None => write!(w, ",,,,,,,"),
        }
        .map_err(io)?;
        if with_id {
            write!(w, ",{}", p.id.unwrap_or(-1)).map_err(io)?;
        }
        writeln!(w).map_err(io)?;
    }
    w.flush().map_err(io)
}

/// Canvas coordinate of the centre of image pixel `v` at `scale`.
fn canvas_coord(v: f64, scale: usize) -> f64 {
    v * scale as f64 + (scale as f64 - 1.0) / 2.0
}

/// The first frame in grey (0.5–99.8 percentile stretch), every track as a coloured polyline
/// and the first frame's detections circled in green.
fn render_overlay(
    movie: &Movie,
    ps: &[Particle],
    tracks: &[Vec<(u32, f64, f64)>],
) -> Result<Canvas> {
    let frame = movie.frame(0)?;
    let (h, w) = frame.dim();
    let vals = frame.to_f64_vec();
    let lo = draw::percentile(&vals, 0.5).unwrap_or(0.0);
    let hi = draw::percentile(&vals, 99.8).unwrap_or(1.0);
    let s = OVERLAY_SCALE;
    let mut cv = Canvas::new(w * s, h * s, draw::BLACK);
    cv.blit_map(0, 0, h, w, &vals, s, false, |v| draw::grey(v, lo, hi));
    for (i, t) in tracks.iter().enumerate() {
        if t.len() < 2 {
            continue;
        }
        let pts: Vec<(f64, f64)> = t
            .iter()
            .map(|&(_, y, x)| (canvas_coord(x, s), canvas_coord(y, s)))
            .collect();
        cv.polyline(&pts, 1, draw::palette(i));
    }
    for p in ps.iter().filter(|p| p.frame == 0) {
        let (y, x) = position(p);
        let r = (p.sigma * std::f64::consts::SQRT_2 + 1.5) * s as f64;
        cv.circle(canvas_coord(x, s), canvas_coord(y, s), r, 1.0, GREEN);
    }
    Ok(cv)
}

/// The S/N map ([`draw::render_snr_map`]: viridis, row 0 at the bottom, NaN in dark grey, a
/// colour bar with its range), the recovered planet circled in red and the true position
/// marked with a small white cross.
fn render_snr(snr: &Array2<f64>, rec: &Recovered, truth: &PlanetTruth) -> Result<SnrFigure> {
    let opts = SnrMapOptions {
        title: Some("PACO S/N".into()),
        markers: vec![
            Marker::cross(truth.y, truth.x, WHITE),
            Marker::circle(rec.y, rec.x, RED),
        ],
        max_side: SNR_PNG_SIDE,
        ..Default::default()
    };
    draw::render_snr_map(snr.view(), &opts)
}

/// The generated inputs, for running `detect`, `track` and `paco` by hand.
fn write_inputs(dir: &Path, movie: &Movie, truth: &[TruthPoint], adi: &AdiData) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| BridgeError::io(dir.display().to_string(), e))?;
    if let Movie::U16(a) = movie {
        let payload: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        write_file(
            &dir.join("movie.npy"),
            &npy::encode_npy("<u2", a.shape(), &payload),
        )?;
    }
    let mut csv = String::from("frame,particle,y,x,sigma,amplitude\n");
    for t in truth {
        let _ = writeln!(
            csv,
            "{},{},{:.4},{:.4},{:.4},{:.3}",
            t.frame, t.particle, t.y, t.x, t.sigma, t.amplitude
        );
    }
    write_file(&dir.join("truth.csv"), csv.as_bytes())?;
    fits::write_image(dir.join("adi_cube.fits"), &adi.cube.clone().into_dyn())?;
    fits::write_image(dir.join("adi_angles.fits"), &adi.angles.clone().into_dyn())?;
    fits::write_image(dir.join("adi_psf.fits"), &adi.psf.clone().into_dyn())
}

// ---------------------------------------------------------------------------------------------
// Summary

struct Report<'a> {
    seed: u64,
    requested: String,
    det: &'a Choice,
    paco: &'a Choice,
    movie: (usize, usize, usize),
    score: &'a algorithms::detect::synth::MatchStats,
    detections: usize,
    tracks: usize,
    long_tracks: usize,
    largest_subnet: usize,
    adi: &'a AdiData,
    planet: &'a Recovered,
    fwhm_used: Option<f64>,
    psf_norm_factor: f64,
    timings: &'a [(&'static str, f64)],
    frames_per_s: f64,
    overlay: (usize, usize),
    snr_png: &'a SnrFigure,
    out: &'a Path,
    inputs: bool,
}

impl Report<'_> {
    fn text(&self) -> String {
        let (t, h, w) = self.movie;
        let sc = self.score;
        let p = self.planet;
        let tr = &self.adi.planet;
        let (at, an, _) = self.adi.cube.dim();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "arraybridge demo (seed {}, --device {})",
            self.seed, self.requested
        );
        let _ = writeln!(
            s,
            "  detection + tracking on {}: {}",
            self.det.device, self.det.reason
        );
        let _ = writeln!(s, "  PACO on {}: {}", self.paco.device, self.paco.reason);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "particles: {t} frames of {h}x{w} u16, {} Brownian particles (step {} px/frame), Poisson noise",
            MOVIE.2, MOVIE.3
        );
        let _ = writeln!(
            s,
            "  detections  {} (blob_log σ 1–3, 10 scales, threshold_rel 0.2, sub-pixel refinement), {:.0} frames/s",
            self.detections, self.frames_per_s
        );
        let _ = writeln!(
            s,
            "  recall      {:.3}  precision {:.3}  ({} of {} true positions matched within {MATCH_RADIUS} px, RMS error {:.2} px)",
            sc.recall, sc.precision, sc.matched, sc.truth, sc.rmse
        );
        let _ = writeln!(
            s,
            "  tracks      {} (search range {} px, memory {}); {} cover ≥ 90% of the frames; {} true particles",
            self.tracks, LINK.0, LINK.1, self.long_tracks, MOVIE.2
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "ADI: {at} frames of {an}x{an}, field rotation {ROTATION}°, PSF FWHM {FWHM} px, planet at separation {} px, angle {}°, contrast {:.1e}",
            tr.separation, tr.angle_deg, tr.contrast
        );
        let _ = writeln!(s, "  planet true       (y, x) = ({:.2}, {:.2})", tr.y, tr.x);
        let _ = writeln!(
            s,
            "  planet recovered  (y, x) = ({:.2}, {:.2}), S/N {:.1}, error {:.2} px",
            p.y, p.x, p.snr, p.error
        );
        let _ = writeln!(
            s,
            "  contrast          true {:.2e}, unbiased estimate {}, b/a at the peak {:.2e} (biased low)",
            tr.contrast,
            p.unbiased
                .map_or_else(|| "n/a".to_owned(), |(c, e)| format!("{c:.2e} ± {e:.1e}")),
            p.contrast
        );
        let _ = writeln!(
            s,
            "  strongest other peak: S/N {:.1} (farther than 2 FWHM; search outside {IWA} px from the star)",
            p.false_alarm_snr
        );
        let _ = writeln!(s);
        let times: Vec<String> = self
            .timings
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        let _ = writeln!(s, "timings (s): {}", times.join(", "));
        let _ = writeln!(
            s,
            "outputs in {}: detections.csv tracks.csv overlay.png snr.png snr.fits summary.txt summary.json{}",
            self.out.display(),
            if self.inputs {
                " inputs/ (movie.npy truth.csv adi_cube.fits adi_angles.fits adi_psf.fits)"
            } else {
                ""
            }
        );
        s
    }

    fn json(&self) -> serde_json::Value {
        let (t, h, w) = self.movie;
        let sc = self.score;
        let p = self.planet;
        let tr = &self.adi.planet;
        let (at, an, _) = self.adi.cube.dim();
        let choice = |c: &Choice| {
            let estimate = c.estimate.as_ref().map(|d| {
                let devices: Vec<serde_json::Value> = d
                    .estimates
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "device": e.device.to_string(),
                            "transfer_s": e.transfer_s,
                            "compute_s": e.compute_s,
                            "total_s": e.total_s(),
                            "fits_in_memory": e.fits,
                        })
                    })
                    .collect();
                serde_json::json!({ "cpu_s": d.cpu_s, "devices": devices })
            });
            serde_json::json!({
                "device": c.device.to_string(),
                "reason": c.reason,
                "estimate": estimate,
            })
        };
        let timings: serde_json::Map<String, serde_json::Value> = self
            .timings
            .iter()
            .map(|(k, v)| (k.replace(' ', "_"), serde_json::json!(v)))
            .collect();
        let nan_null = |v: f64| if v.is_finite() { Some(v) } else { None };
        serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "seed": self.seed,
            "device_requested": self.requested,
            "detection": {
                "device": choice(self.det),
                "movie": { "frames": t, "height": h, "width": w, "dtype": "u16",
                           "particles": MOVIE.2, "step_px": MOVIE.3 },
                "method": "blob_log (min_sigma 1, max_sigma 3, num_sigma 10, threshold_rel 0.2) + refinement",
                "detections": self.detections,
                "truth_points": sc.truth,
                "matched": sc.matched,
                "match_radius_px": MATCH_RADIUS,
                "recall": nan_null(sc.recall),
                "precision": nan_null(sc.precision),
                "rmse_px": nan_null(sc.rmse),
                "frames_per_s": self.frames_per_s,
            },
            "tracking": {
                "search_range_px": LINK.0,
                "memory": LINK.1,
                "tracks": self.tracks,
                "tracks_covering_90pct": self.long_tracks,
                "true_particles": MOVIE.2,
                "largest_subnet": self.largest_subnet,
            },
            "paco": {
                "device": choice(self.paco),
                "cube": { "frames": at, "height": an, "width": an,
                          "rotation_deg": ROTATION, "fwhm_px": FWHM,
                          "centre": [self.adi.centre.0, self.adi.centre.1] },
                "psf_norm_factor": self.psf_norm_factor,
                "fwhm_used": self.fwhm_used,
                "planet_true": { "y": tr.y, "x": tr.x, "separation_px": tr.separation,
                                 "angle_deg": tr.angle_deg, "contrast": tr.contrast },
                "planet_recovered": { "y": p.y, "x": p.x, "pixel": [p.pixel.0, p.pixel.1],
                                      "snr": nan_null(p.snr), "contrast_peak_b_over_a": nan_null(p.contrast),
                                      "contrast_unbiased": p.unbiased.and_then(|u| nan_null(u.0)),
                                      "contrast_unbiased_std": p.unbiased.and_then(|u| nan_null(u.1)),
                                      "error_px": nan_null(p.error) },
                "max_other_snr": nan_null(p.false_alarm_snr),
                "inner_working_angle_px": IWA,
            },
            "timings_s": timings,
            "outputs": {
                "detections_csv": "detections.csv",
                "tracks_csv": "tracks.csv",
                "overlay_png": { "file": "overlay.png", "width": self.overlay.0,
                                 "height": self.overlay.1, "scale": OVERLAY_SCALE,
                                 "detection_rgb": GREEN },
                "snr_png": { "file": "snr.png", "width": self.snr_png.canvas.width(),
                             "height": self.snr_png.canvas.height(), "scale": self.snr_png.scale,
                             "row0_at_bottom": true, "marker_rgb": RED,
                             "marker_radius": self.snr_png.marker_radius, "truth_rgb": WHITE,
                             "nan_rgb": draw::NAN_COLOUR },
                "snr_fits": "snr.fits",
                "inputs": if self.inputs { Some("inputs") } else { None },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use algorithms::paco::{EdgeRule, Geometry, Rounding};

    #[test]
    fn planet_follows_paco_geometry() {
        let g = Geometry {
            height: 80,
            width: 80,
            sub: (40.0, 40.0),
            add: (40.0, 40.0),
            rounding: Rounding::Trunc,
            radius: 4,
            edge: EdgeRule::Box,
        };
        let (sep, pa) = (18.0, 30.0);
        let (y0, x0) = frame_position((40.0, 40.0), sep, pa, 0.0);
        for angle in [-40.0, -3.5, 0.0, 12.0, 40.0] {
            let (y, x) = frame_position((40.0, 40.0), sep, pa, angle);
            let (gy, gx) = g.position(y0, x0, angle);
            assert!((y - gy).abs() < 1e-9 && (x - gx).abs() < 1e-9, "{angle}");
        }
    }

    #[test]
    fn adi_cube_is_deterministic_and_has_the_planet() {
        let a = synthetic_adi_with_planet(8, 48, 3);
        let b = synthetic_adi_with_planet(8, 48, 3);
        assert_eq!(a.cube, b.cube);
        assert_eq!(a.cube.dim(), (8, 48, 48));
        assert_eq!(a.angles.len(), 8);
        assert!((a.angles[7] - a.angles[0] - ROTATION).abs() < 1e-9);
        // monotonic, fastest mid-sequence (meridian transit)
        let d: Vec<f64> = a
            .angles
            .windows(2)
            .into_iter()
            .map(|w| w[1] - w[0])
            .collect();
        assert!(d.iter().all(|&v| v > 0.0) && d[3] > d[0]);
        let (ph, pw) = a.psf.dim();
        assert_eq!((ph, pw), (21, 21));
        assert_eq!(
            a.psf
                .indexed_iter()
                .fold(((0, 0), 0.0), |m, (i, &v)| if v > m.1 { (i, v) } else { m })
                .0,
            (10, 10)
        );
        assert!(a.cube.iter().all(|v| v.is_finite()));
        let c = synthetic_adi_with_planet(8, 48, 4);
        assert_ne!(a.cube, c.cube);
    }
}
