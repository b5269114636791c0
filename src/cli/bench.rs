//! `arraybridge bench`: measurements printed as tables (the same code the criterion benches use).
//!
//! Subcommands: `transfer` (host↔device copy bandwidth next to a plain copy reference) and
//! `paco` (PACO on a synthetic ADI cube) and `detect` (LoG detection on a synthetic movie, the
//! original `benchmark_gpu(movie_size, n_particles, batch_sizes)`).

use bridge_core::{BridgeError, Device, Result};

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
    /// LoG detection of a synthetic movie, end to end, for each batch size.
    Detect(DetectArgs),
}

/// Arguments of `arraybridge bench detect`.
#[derive(Debug, clap::Args)]
pub struct DetectArgs {
    /// Frames in the synthetic movie.
    #[arg(long, default_value_t = 100)]
    pub frames: usize,
    /// Frame side in pixels.
    #[arg(long, default_value_t = 512)]
    pub size: usize,
    /// Particles in the movie.
    #[arg(long, default_value_t = 100)]
    pub particles: usize,
    /// Batch sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub batch_sizes: Vec<usize>,
    /// Device to run on.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// Seed of the synthetic movie.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Arguments of `arraybridge bench paco`.
#[derive(Debug, clap::Args)]
pub struct PacoArgs {
    /// Frames in the synthetic cube.
    #[arg(long, default_value_t = 61)]
    pub frames: usize,
    /// Frame side in pixels.
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// Repetitions (the report gives the median and best).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Device to run on.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
}

/// Arguments of `arraybridge bench transfer`.
#[derive(Debug, clap::Args)]
pub struct TransferArgs {
    /// Device to measure (`cuda:N` or `opencl:N`).
    #[arg(long, default_value = "cuda:0")]
    pub device: Device,
    /// Sizes in MiB, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    pub sizes_mb: Vec<usize>,
    /// Repetitions per size (the best is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
}

/// Run a benchmark.
pub fn run(args: Args) -> Result<()> {
    match args.what {
        What::Transfer(a) => transfer(a),
        What::Detect(a) => detect(a),
        What::Paco(a) => {
            if a.frames == 0 || a.size == 0 || a.reps == 0 {
                return Err(BridgeError::invalid_argument(
                    "bench paco",
                    "--frames, --size and --reps must be positive",
                ));
            }
            eprintln!(
                "bench paco on {}: {}x{}x{}, {} reps",
                a.device, a.frames, a.size, a.size, a.reps
            );
            let rows = algorithms::paco::bench::bench_report(a.frames, a.size, a.reps, a.device)?;
            print!("{}", algorithms::paco::bench::format_table(&rows));
            Ok(())
        }
    }
}

fn transfer(a: TransferArgs) -> Result<()> {
    if a.sizes_mb.is_empty() || a.sizes_mb.contains(&0) {
        return Err(BridgeError::invalid_argument(
            "--sizes-mb",
            "sizes must be positive",
        ));
    }
    #[cfg_attr(
        not(any(feature = "cuda", feature = "opencl")),
        allow(unused_variables)
    )]
    let sizes: Vec<usize> = a.sizes_mb.iter().map(|m| m << 20).collect();
    eprintln!(
        "bench transfer on {}: sizes {:?} MiB, best of {}",
        a.device, a.sizes_mb, a.reps
    );
    match a.device {
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => {
            let gpu = bridge_cuda::gpu(n)?;
            let rows = bridge_cuda::bench::transfer_report(&gpu, &sizes, a.reps)?;
            print!("{}", bridge_cuda::bench::format_table(&rows));
            Ok(())
        }
        #[cfg(feature = "opencl")]
        Device::OpenCl(_) => opencl_transfer(a.device, &sizes, a.reps),
        other => Err(BridgeError::Unsupported(format!(
            "bench transfer measures the devices of the compiled-in backends (cuda:N with the \
             `cuda` feature, opencl:N with `opencl`); got {other}"
        ))),
    }
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

fn detect(a: DetectArgs) -> Result<()> {
    use algorithms::detect::synth::{benchmark_detect, synthetic_movie};
    if a.frames == 0 || a.size < 16 || a.batch_sizes.is_empty() || a.batch_sizes.contains(&0) {
        return Err(BridgeError::invalid_argument(
            "bench detect",
            "--frames and --batch-sizes must be positive and --size at least 16",
        ));
    }
    let backend = algorithms::detect::backend_for(a.device)?;
    eprintln!(
        "bench detect on {}: {}x{}x{} movie, {} particles",
        a.device, a.frames, a.size, a.size, a.particles
    );
    let movie = synthetic_movie(a.frames, a.size, a.particles, 1.0, a.seed);
    let detector = algorithms::detect::LogDetector::default();
    let rows = benchmark_detect(&movie, &detector, backend.as_ref(), &a.batch_sizes)?;
    println!(
        "| batch | frames | total s | kernel s | ms/frame | frames/s | detections | recall | precision | rmse px |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
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
        );
    }
    Ok(())
}

#[cfg(feature = "opencl")]
fn opencl_transfer(device: Device, sizes: &[usize], reps: usize) -> Result<()> {
    use bridge_core::{DType, HostData};
    let cl = bridge_opencl::shared();
    println!(
        "| size | memcpy GB/s | host→opencl GB/s | opencl→host GB/s | h2d % of memcpy | d2h % of memcpy |"
    );
    println!("|---|---|---|---|---|---|");
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
        println!(
            "| {} MiB | {memcpy:.2} | {h2d:.2} | {d2h:.2} | {:.0}% | {:.0}% |",
            bytes >> 20,
            100.0 * h2d / memcpy,
            100.0 * d2h / memcpy
        );
    }
    Ok(())
}
