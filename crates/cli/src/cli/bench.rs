//! `arraybridge bench`: measurements printed as tables (the same code the criterion benches use).
//!
//! Subcommands: `transfer` (host↔device copy bandwidth next to a plain copy reference) and
//! `paco` (PACO on a synthetic ADI cube) and `detect` (LoG detection on a synthetic movie, the
//! original `benchmark_gpu(movie_size, n_particles, batch_sizes)`; `--method locate` times
//! trackpy's `locate` instead), and `scaling` (the same job on 1, 2, … devices or MPI ranks:
//! [`super::scaling`]).

use crate::cli::common::{outln, outp};
use bridge_core::host::{check_allocation, checked_product};
use bridge_core::{BridgeError, Device, Result};

use super::common::Global;
use super::device::{
    DETECT, DeviceArg, PACO, detect_estimate, nominal_cpu, paco_workload, parse_device_arg, resolve,
};
use arraybridge::core::offload::{CpuProfile, Workload};

/// Arguments of `arraybridge bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which benchmark.
    #[command(subcommand)]
    pub what: What,
}

/// The benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Host↔device and device↔device copy bandwidth, next to a plain copy of the same size.
    Transfer(TransferArgs),
    /// PACO on a synthetic ADI cube of `--frames` frames of `--size`² pixels.
    Paco(PacoArgs),
    /// Detection of a synthetic movie (LoG, or `locate` with `--method locate`), end to end,
    /// for each batch size.
    Detect(DetectArgs),
    /// The same `detect` or `paco` job on 1, 2, … workers (devices in one process, and MPI
    /// ranks with the `mpi` feature and `mpirun`): wall time, speed-up, efficiency, cost.
    Scaling(super::scaling::ScalingArgs),
}

/// Arguments of `arraybridge bench detect`.
#[derive(Debug, clap::Args)]
pub struct DetectArgs {
    /// Frames in the synthetic movie.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub frames: u64,
    /// Frame side in pixels.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(16..=65_536))]
    pub size: u64,
    /// Particles in the movie (at most one per 100 pixels: they are placed 10 px apart).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    pub particles: u64,
    /// Batch sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8",
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch_sizes: Vec<u64>,
    /// Device: `auto` (the offload decision), `cpu`, `cuda:N` or `opencl:N`.
    #[arg(long, default_value = "auto", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// Seed of the synthetic movie.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Detection method: `log` (LogDetector defaults) or `locate` (trackpy, `--diameter`,
    /// `--minmass`).
    #[arg(long, value_enum, default_value_t = super::detect::Method::Log)]
    pub method: super::detect::Method,
    /// [locate] Feature diameter (odd).
    #[arg(long, default_value_t = 7)]
    pub diameter: usize,
    /// [locate] Minimum integrated brightness.
    #[arg(long, default_value_t = 200.0)]
    pub minmass: f64,
    /// Keep the synthetic movie in this folder and reuse it: a `.npy` movie (u16, readable by
    /// NumPy, so peers can time the same frames) and its ground truth. A saved movie of at
    /// least `--frames` frames of the same size, particles and seed is read instead of
    /// generated (its first frames are the shorter movie's, frame for frame).
    #[arg(long, value_name = "DIR")]
    pub movie_cache: Option<std::path::PathBuf>,
    /// Save the movie into `--movie-cache` (when it is not there yet) and stop: no detection.
    #[arg(long, requires = "movie_cache")]
    pub prepare_only: bool,
    /// Volumes of this many z planes instead of a movie of frames: `--frames` volumes of
    /// `Z × --size × --size`, detected in 3-D with scikit-image's n-D blob_log on the CPU
    /// (σ 1…5, 9 scales, threshold_rel 0.1); volumes per second. With `--movie-cache` they are
    /// written as a 4-D .npy for `scripts/bench_volume_skimage.py`.
    #[arg(long, value_name = "Z", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub volume: Option<u64>,
}

/// Arguments of `arraybridge bench paco`.
#[derive(Debug, clap::Args)]
pub struct PacoArgs {
    /// Frames in the synthetic cube.
    #[arg(long, default_value_t = 61, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub frames: u64,
    /// Frame side in pixels (at least 21: the synthetic cube's PSF is 21×21).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(21..=65_536))]
    pub size: u64,
    /// Repetitions (the report gives the median and best).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub reps: u64,
    /// Device: `auto` (the offload decision), `cpu`, `cuda:N` or `opencl:N`.
    #[arg(long, default_value = "auto", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// Sub-pixel modes to time, comma-separated, in this order.
    #[arg(long, value_delimiter = ',', default_value = "off,table,spline5")]
    pub modes: Vec<PacoModeArg>,
}

/// A sub-pixel mode of `bench paco`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PacoModeArg {
    /// No sub-pixel templates.
    Off,
    /// Table templates (q = 32).
    Table,
    /// Quintic B-spline templates.
    Spline5,
}

/// Arguments of `arraybridge bench transfer`.
#[derive(Debug, clap::Args)]
pub struct TransferArgs {
    /// Device: `auto` (the first GPU or OpenCL device; the CPU has no transfers to measure),
    /// `cuda:N` or `opencl:N`.
    #[arg(long, default_value = "auto", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// Sizes in MiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256",
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub sizes_mb: Vec<u64>,
    /// Repetitions per size (the best is reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub reps: u64,
}

/// Run a benchmark. The tuning knobs in effect ([`bridge_core::tuning`]) come first (a line on
/// stdout, or the `knobs` object of the JSON), so a figure always says what it was measured
/// with.
pub fn run(args: Args, g: Global) -> Result<()> {
    if !g.json {
        outln!("knobs: {}", knobs_line())?;
    }
    match args.what {
        What::Transfer(a) => transfer(a, g),
        What::Detect(a) => detect(a, g),
        What::Paco(a) => paco(a, g),
        What::Scaling(a) => super::scaling::run(a, g),
    }
}

/// The knobs in effect as `NAME=value` pairs.
fn knobs_line() -> String {
    bridge_core::tuning::snapshot()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The knobs in effect as a JSON object.
fn knobs_json() -> serde_json::Value {
    bridge_core::tuning::snapshot()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A `u64` flag as `usize` (a typed error on 32-bit targets where it does not fit).
fn to_usize(v: u64, flag: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| BridgeError::invalid_argument(flag, format!("{v} is too large")))
}

/// The device a benchmark runs on: the commands' one `--device` policy ([`resolve`]: an
/// explicit device is checked, `auto` is the offload decision on `estimate`, printed).
fn bench_device(
    command: &str,
    arg: DeviceArg,
    stage: super::device::Stage,
    g: Global,
    estimate: impl FnOnce() -> Result<(Workload, CpuProfile, String)>,
) -> Result<Device> {
    // a list is for `bench scaling` (which the error names)
    let arg = arg.single(command)?;
    let choice = resolve(arg, stage, estimate)?;
    if let Some(note) = choice.auto_note("bench") {
        g.note(note);
    }
    Ok(choice.device)
}

fn paco(a: PacoArgs, g: Global) -> Result<()> {
    let (frames, size, reps) = (
        to_usize(a.frames, "--frames")?,
        to_usize(a.size, "--size")?,
        to_usize(a.reps, "--reps")?,
    );
    // The cube, its derotated copies and the five maps, in f64.
    let bytes = checked_product(&[a.frames, a.size, a.size, 8, 3]).unwrap_or(u64::MAX);
    check_allocation(
        bytes,
        &format!("bench paco --frames {} --size {}", a.frames, a.size),
        "use fewer frames or a smaller --size",
    )?;
    let device = bench_device("bench paco", a.device, PACO, g, || {
        let (cpu, note) = nominal_cpu();
        let radius = algorithms::paco::PacoParams::default().psf_rad;
        Ok((paco_workload(frames, size, radius), cpu, note))
    })?;
    g.note(format!(
        "bench paco on {device}: {frames}x{size}x{size}, {reps} reps"
    ));
    use algorithms::paco::bench::BenchMode;
    let modes: Vec<BenchMode> = a
        .modes
        .iter()
        .map(|m| match m {
            PacoModeArg::Off => BenchMode::Off,
            PacoModeArg::Table => BenchMode::Table,
            PacoModeArg::Spline5 => BenchMode::Spline5,
        })
        .collect();
    let rows = algorithms::paco::bench::bench_report_modes(
        frames,
        size,
        reps,
        &arraybridge::open_device(device)?,
        &modes,
    )?;
    if g.json {
        return g.print_json(&serde_json::json!({
            "command": "bench paco", "device": device.to_string(), "knobs": knobs_json(),
            "frames": frames, "size": size, "reps": reps,
            "rows": rows.iter().map(|r| serde_json::json!({
                "what": r.what, "shape": [r.shape.0, r.shape.1, r.shape.2],
                "best_s": r.best_s, "median_s": r.median_s,
            })).collect::<Vec<_>>(),
        }));
    }
    outp!("{}", algorithms::paco::bench::format_table(&rows))?;
    Ok(())
}

fn transfer(a: TransferArgs, g: Global) -> Result<()> {
    let largest = a.sizes_mb.iter().copied().max().unwrap_or(0);
    if a.sizes_mb.is_empty() {
        return Err(BridgeError::invalid_argument(
            "--sizes-mb",
            "give at least one size",
        ));
    }
    // The source and destination host buffers of the largest size.
    check_allocation(
        largest.saturating_mul(2 << 20),
        &format!("bench transfer --sizes-mb {largest}"),
        "use smaller sizes",
    )?;
    #[cfg_attr(
        not(any(feature = "cuda", feature = "opencl")),
        allow(unused_variables)
    )]
    let sizes: Vec<usize> = a
        .sizes_mb
        .iter()
        .map(|&m| to_usize(m << 20, "--sizes-mb"))
        .collect::<Result<_>>()?;
    let reps = to_usize(a.reps, "--reps")?;
    let device = match a.device {
        several @ (DeviceArg::Several(_) | DeviceArg::AllGpus) => {
            return Err(super::device::several_error(&several, "bench transfer"));
        }
        DeviceArg::Explicit(d) => d,
        DeviceArg::Auto => {
            let d = arraybridge::registry()
                .device_infos()
                .map(|i| i.device)
                .next()
                .ok_or_else(|| {
                    BridgeError::unavailable(
                        "cuda/opencl",
                        "bench transfer measures host↔device copies, and no CUDA or OpenCL \
                         device is available (see `arraybridge devices`)",
                    )
                })?;
            g.note(format!(
                "bench transfer: device auto → {d} (the first device)"
            ));
            d
        }
    };
    check_device_in_host(device, largest)?;
    g.note(format!(
        "bench transfer on {device}: sizes {:?} MiB, best of {reps}",
        a.sizes_mb
    ));
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => {
            let gpu = arraybridge::bridge_cuda::gpu(n)?;
            let rows = arraybridge::bridge_cuda::bench::transfer_report(&gpu, &sizes, reps)?;
            if g.json {
                return g.print_json(&serde_json::json!({
                    "command": "bench transfer", "device": device.to_string(),
                    "knobs": knobs_json(),
                    "rows": rows.iter().map(|r| serde_json::json!({
                        "direction": r.direction, "path": r.path, "bytes": r.bytes,
                        "gb_per_s": r.gb_per_s,
                    })).collect::<Vec<_>>(),
                }));
            }
            outp!("{}", arraybridge::bridge_cuda::bench::format_table(&rows))?;
            Ok(())
        }
        #[cfg(feature = "opencl")]
        Device::OpenCl(_) => opencl_transfer(device, &sizes, reps, g),
        other => Err(BridgeError::Unsupported(format!(
            "bench transfer measures the devices of the compiled-in backends (cuda:N with the \
             `cuda` feature, opencl:N with `opencl`); got {other}"
        ))),
    }
}

/// On a device whose memory is the host's (an OpenCL CPU device such as PoCL) the device
/// buffers are host memory too: at the largest size, the source, its staged copy, the memcpy
/// target, the resident device buffer, the one being uploaded or downloaded and PoCL's own
/// staging (six buffers) must fit the budget together: PoCL aborts the process when an
/// allocation fails inside it.
fn check_device_in_host(device: Device, largest_mb: u64) -> Result<()> {
    let in_host = arraybridge::registry()
        .device_infos()
        .find(|i| i.device == device)
        .is_some_and(|i| i.is_cpu_device());
    if !in_host {
        return Ok(());
    }
    check_allocation(
        largest_mb.saturating_mul(6 << 20),
        &format!(
            "bench transfer --sizes-mb {largest_mb} on {device} (six buffers of that size: three \
             host buffers and the device's, which on this CPU device are host memory too)"
        ),
        "use smaller sizes",
    )
}

/// Best-of-`reps` throughput in GB/s (10⁹ bytes/s) of `f` moving `bytes`.
#[cfg(feature = "opencl")]
fn best_gb_per_s(reps: usize, bytes: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?; // warm-up
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = std::time::Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(bytes as f64 / best / 1e9)
}

/// Run `arraybridge bench detect`: the checked sizes, the method, the movie (generated, or read
/// from `--movie-cache`), the device and its memory check, the rows, then the table or JSON.
fn detect(a: DetectArgs, g: Global) -> Result<()> {
    use algorithms::detect::synth::{benchmark_detect, synthetic_movie};
    if let Some(z) = a.volume {
        let v = super::bench_volume::VolumeBench {
            frames: a.frames,
            size: a.size,
            particles: a.particles,
            seed: a.seed,
            device: a.device,
            method: a.method,
            movie_cache: a.movie_cache,
            prepare_only: a.prepare_only,
        };
        return super::bench_volume::run(&v, z, g);
    }
    let (frames, size, particles, batch_sizes) = detect_sizes(&a)?;
    let detector = algorithms::detect::LogDetector::default();
    let locate = a.method == super::detect::Method::Locate;
    let lp = algorithms::detect::LocateParams {
        minmass: a.minmass,
        ..algorithms::detect::LocateParams::new(a.diameter)
    };
    if locate {
        lp.validate()?;
    }
    let movie = match &a.movie_cache {
        Some(dir) => cache::movie(dir, frames, size, particles, a.seed, g)?,
        None => synthetic_movie(frames, size, particles, 1.0, a.seed),
    };
    if a.prepare_only {
        return Ok(());
    }
    let device = bench_device("bench detect", a.device, DETECT, g, || {
        detect_estimate(&movie.movie, &detector)
    })?;
    let backend = algorithms::detect::backend_for(&arraybridge::open_device(device)?)?;
    if !locate {
        // what this back end holds per frame (the CPU never holds the whole scale space)
        for &b in &batch_sizes {
            algorithms::detect::LogDetector {
                batch_size: b,
                ..detector.clone()
            }
            .check_memory_on(size, size, frames, &[backend.as_ref()])?;
        }
    } else {
        for &b in &batch_sizes {
            algorithms::detect::locate::check_memory(size, size, b.min(frames), "--batch-sizes")?;
        }
    }
    g.note(format!(
        "bench detect ({}) on {device}: {frames}x{size}x{size} movie, {particles} particles",
        if locate {
            format!("locate, diameter {}, minmass {}", a.diameter, a.minmass)
        } else {
            "log".to_owned()
        }
    ));
    let rows = if locate {
        algorithms::detect::synth::benchmark_locate(&movie, &lp, backend.as_ref(), &batch_sizes)?
    } else {
        benchmark_detect(&movie, &detector, backend.as_ref(), &batch_sizes)?
    };
    detect_report(g, device, locate, &rows)
}

/// `bench detect`'s sizes as `usize`: frames, frame side, particles and batch sizes, checked (at
/// least one batch size, particles that fit the frames, the movie and its truth within the
/// memory budget).
fn detect_sizes(a: &DetectArgs) -> Result<(usize, usize, usize, Vec<usize>)> {
    let (frames, size, particles) = (
        to_usize(a.frames, "--frames")?,
        to_usize(a.size, "--size")?,
        to_usize(a.particles, "--particles")?,
    );
    let batch_sizes: Vec<usize> = a
        .batch_sizes
        .iter()
        .map(|&b| to_usize(b, "--batch-sizes"))
        .collect::<Result<_>>()?;
    if batch_sizes.is_empty() {
        return Err(BridgeError::invalid_argument(
            "--batch-sizes",
            "give at least one batch size",
        ));
    }
    // Particles are placed at least 10 px apart, inside an 8-px margin.
    let room = (a.size.saturating_sub(17)).pow(2) / 100;
    if a.particles > room {
        return Err(BridgeError::invalid_argument(
            "--particles",
            format!(
                "{} particles do not fit {}x{} frames (they are placed 10 px apart); at most \
                 {room} fit",
                a.particles, a.size, a.size
            ),
        ));
    }
    // The u16 movie, the truth table and the largest batch's scale space.
    let movie_bytes = checked_product(&[a.frames, a.size, a.size, 2]).unwrap_or(u64::MAX);
    let truth_bytes = checked_product(&[a.frames, a.particles, 40]).unwrap_or(u64::MAX);
    check_allocation(
        movie_bytes.saturating_add(truth_bytes),
        &format!(
            "bench detect --frames {} --size {} --particles {}",
            a.frames, a.size, a.particles
        ),
        "use fewer frames, smaller frames or fewer particles",
    )?;
    Ok((frames, size, particles, batch_sizes))
}

/// `bench detect`'s rows: a note where kernel times are missing, then the JSON with `--json`,
/// else a Markdown table.
fn detect_report(
    g: Global,
    device: Device,
    locate: bool,
    rows: &[algorithms::detect::synth::BenchRow],
) -> Result<()> {
    if device != Device::Cpu && rows.iter().any(|r| r.kernel_s.is_none()) {
        g.note(
            "kernel s: not measured where launches are asynchronous (CUDA's default); \
             ARRAYBRIDGE_TRACE=1 or ARRAYBRIDGE_CUDA_LAUNCH=sync waits for each kernel to time it",
        );
    }
    if g.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "batch": r.batch_size, "frames": r.frames, "total_s": r.end_to_end_s,
                    "kernel_s": r.kernel_s, "ms_per_frame": r.ms_per_frame,
                    "frames_per_s": r.frames_per_s, "detections": r.detections,
                    "recall": r.score.recall, "precision": r.score.precision,
                    "rmse_px": r.score.rmse,
                })
            })
            .collect();
        return g.print_json(&serde_json::json!({
            "command": "bench detect", "method": if locate { "locate" } else { "log" },
            "device": device.to_string(), "knobs": knobs_json(), "rows": v,
        }));
    }
    outln!(
        "| batch | frames | total s | kernel s | ms/frame | frames/s | detections | recall | precision | rmse px |"
    )?;
    outln!("|---|---|---|---|---|---|---|---|---|---|")?;
    for r in rows {
        outln!(
            "| {} | {} | {:.3} | {} | {:.2} | {:.1} | {} | {:.3} | {:.3} | {:.3} |",
            r.batch_size,
            r.frames,
            r.end_to_end_s,
            r.kernel_s.map_or("-".to_owned(), |k| format!("{k:.3}")),
            r.ms_per_frame,
            r.frames_per_s,
            r.detections,
            r.score.recall,
            r.score.precision,
            r.score.rmse
        )?;
    }
    Ok(())
}

#[cfg(feature = "opencl")]
fn opencl_transfer(device: Device, sizes: &[usize], reps: usize, g: Global) -> Result<()> {
    use bridge_core::{DType, HostData};
    let cl = arraybridge::registry()
        .backend_of::<arraybridge::bridge_opencl::OpenClBackend>()
        .ok_or_else(|| {
            bridge_core::BridgeError::unavailable("opencl", "the registry has no OpenCL back end")
        })?;
    if !g.json {
        outln!(
            "| size | memcpy GB/s | host→opencl GB/s | opencl→host GB/s | h2d % of memcpy | d2h % of memcpy |"
        )?;
        outln!("|---|---|---|---|---|---|")?;
    }
    let mut rows = Vec::new();
    for &bytes in sizes {
        let src: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
        let host = HostData::from_c_bytes(DType::U8, &[bytes], &src)?;
        let mut dst = vec![0u8; bytes];
        let memcpy = best_gb_per_s(reps, bytes, || {
            dst.copy_from_slice(std::hint::black_box(&src));
            Ok(())
        })?;
        let dev = cl.upload(&host, device)?;
        let h2d = best_gb_per_s(reps, bytes, || cl.upload(&host, device).map(drop))?;
        let d2h = best_gb_per_s(reps, bytes, || cl.download(&dev).map(drop))?;
        if g.json {
            rows.push(serde_json::json!({
                "bytes": bytes, "memcpy_gb_per_s": memcpy, "h2d_gb_per_s": h2d,
                "d2h_gb_per_s": d2h,
            }));
        } else {
            outln!(
                "| {} MiB | {memcpy:.2} | {h2d:.2} | {d2h:.2} | {:.0}% | {:.0}% |",
                bytes >> 20,
                100.0 * h2d / memcpy,
                100.0 * d2h / memcpy
            )?;
        }
    }
    if g.json {
        return g.print_json(&serde_json::json!({
            "command": "bench transfer", "device": device.to_string(), "knobs": knobs_json(),
            "rows": rows,
        }));
    }
    Ok(())
}

/// The synthetic movies of `bench detect --movie-cache`: generating 1000×512² frames takes
/// about half a minute on one core, timing them a fraction of a second, so a harness that times
/// the same movie in several processes (knob A/B, peers) generates it once. Both files are
/// `.npy` (the project's reader and writer): the u16 movie `(T, H, W)` and its truth, f64
/// `(T·P, 6)` with columns frame, particle, y, x, sigma, amplitude, frame by frame.
mod cache {
    use std::io::{BufWriter, Write};
    use std::path::{Path, PathBuf};

    use algorithms::detect::Movie;
    use algorithms::detect::synth::{SyntheticMovie, TruthPoint, synthetic_movie};
    use arraybridge::io::npy::{NpyArray, NpyFrames, encode_npy, read_npy};
    use bridge_core::{BridgeError, Result};

    use crate::cli::common::Global;

    /// Columns of a truth row.
    const COLS: usize = 6;

    fn paths(dir: &Path, size: usize, particles: usize, seed: u64) -> (PathBuf, PathBuf) {
        let stem = format!("synth-u16-{size}-p{particles}-seed{seed}");
        (
            dir.join(format!("{stem}.npy")),
            dir.join(format!("{stem}.truth.npy")),
        )
    }

    /// The movie of `synthetic_movie(frames, size, particles, 1.0, seed)`, read from `dir`
    /// when a long enough one is saved there, else generated and saved.
    pub(super) fn movie(
        dir: &Path,
        frames: usize,
        size: usize,
        particles: usize,
        seed: u64,
        g: Global,
    ) -> Result<SyntheticMovie> {
        let (npy, truth) = paths(dir, size, particles, seed);
        match read(&npy, &truth, frames, size) {
            Ok(Some(m)) => {
                g.note(format!("bench detect: movie read from {}", npy.display()));
                return Ok(m);
            }
            Ok(None) => {}
            Err(e) => g.note(format!(
                "bench detect: the saved movie {} is not usable ({e}); generating it again",
                npy.display()
            )),
        }
        let m = synthetic_movie(frames, size, particles, 1.0, seed);
        write(dir, &npy, &truth, &m, frames, size)?;
        g.note(format!("bench detect: movie saved to {}", npy.display()));
        Ok(m)
    }

    /// `None` when nothing (or too short a movie) is saved; an error when what is saved is
    /// not what its name says.
    fn read(
        npy: &Path,
        truth: &Path,
        frames: usize,
        size: usize,
    ) -> Result<Option<SyntheticMovie>> {
        if !npy.exists() || !truth.exists() {
            return Ok(None);
        }
        let bad =
            |why: &str| BridgeError::InvalidInput(format!("{}: {why}", truth.display()).into());
        let mut reader = NpyFrames::open(npy)?;
        let saved = reader.frames();
        if saved < frames {
            return Ok(None);
        }
        let rows = match read_npy(truth)? {
            NpyArray::F64(t) if t.ndim() == 2 && t.shape()[1] == COLS => t,
            _ => return Err(bad("not a truth table (f64, 6 columns)")),
        };
        if saved == 0 || !rows.shape()[0].is_multiple_of(saved) {
            return Err(bad("the movie and its truth disagree on the frame count"));
        }
        let pts = rows.shape()[0] / saved;
        let budget = bridge_core::host::Budget::current();
        let movie = match reader.next_chunk(frames, &budget)? {
            Some(Movie::U16(a)) if a.dim() == (frames, size, size) => Movie::U16(a),
            _ => return Err(bad("the movie is not u16 frames of the asked size")),
        };
        let truth = rows
            .outer_iter()
            .take(frames * pts)
            .map(|r| TruthPoint {
                frame: r[0] as u32,
                particle: r[1] as u32,
                y: r[2],
                x: r[3],
                sigma: r[4],
                amplitude: r[5],
            })
            .collect();
        Ok(Some(SyntheticMovie { movie, truth }))
    }

    /// Written to temporary names and renamed, so a process stopped half-way leaves no movie
    /// that a later one would read.
    fn write(
        dir: &Path,
        npy: &Path,
        truth: &Path,
        m: &SyntheticMovie,
        frames: usize,
        size: usize,
    ) -> Result<()> {
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |e| BridgeError::io(p, e)
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let Movie::U16(a) = &m.movie else {
            return Err(BridgeError::Unsupported(
                "the synthetic movie is not u16".into(),
            ));
        };
        let tmp = npy.with_extension(format!("npy.{}.tmp", std::process::id()));
        {
            // frame by frame: the movie is not copied whole into a byte buffer
            let f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            let mut w = BufWriter::with_capacity(1 << 20, f);
            w.write_all(&encode_npy("<u2", &[frames, size, size], &[]))
                .map_err(io(&tmp))?;
            let mut buf = Vec::with_capacity(size * size * 2);
            for frame in a.outer_iter() {
                buf.clear();
                buf.extend(frame.iter().flat_map(|v| v.to_le_bytes()));
                w.write_all(&buf).map_err(io(&tmp))?;
            }
            w.into_inner()
                .map_err(|e| BridgeError::io(tmp.display().to_string(), e.into_error()))?
                .sync_all()
                .map_err(io(&tmp))?;
        }
        let table: Vec<u8> = m
            .truth
            .iter()
            .flat_map(|p| {
                [
                    f64::from(p.frame),
                    f64::from(p.particle),
                    p.y,
                    p.x,
                    p.sigma,
                    p.amplitude,
                ]
            })
            .flat_map(f64::to_le_bytes)
            .collect();
        let ttmp = truth.with_extension(format!("npy.{}.tmp", std::process::id()));
        std::fs::write(&ttmp, encode_npy("<f8", &[m.truth.len(), COLS], &table))
            .map_err(io(&ttmp))?;
        // the truth last: a movie without its truth is never read
        std::fs::rename(&tmp, npy).map_err(io(npy))?;
        std::fs::rename(&ttmp, truth).map_err(io(truth))?;
        Ok(())
    }
}
