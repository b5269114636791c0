//! `arraybridge bench`: measurements printed as tables (the same code the criterion benches use).
//!
//! Subcommands: `transfer` (host↔device copy bandwidth next to a plain copy reference).

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
    }
}

fn transfer(a: TransferArgs) -> Result<()> {
    if a.sizes_mb.is_empty() || a.sizes_mb.contains(&0) {
        return Err(BridgeError::invalid_argument("--sizes-mb", "sizes must be positive"));
    }
    let sizes: Vec<usize> = a.sizes_mb.iter().map(|m| m << 20).collect();
    eprintln!("bench transfer on {}: sizes {:?} MiB, best of {}", a.device, a.sizes_mb, a.reps);
    match a.device {
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => {
            let gpu = bridge_cuda::gpu(n)?;
            let rows = bridge_cuda::bench::transfer_report(&gpu, &sizes, a.reps)?;
            print!("{}", bridge_cuda::bench::format_table(&rows));
            Ok(())
        }
        other => Err(BridgeError::Unsupported(format!(
            "bench transfer supports cuda:N{}; got {other}",
            if cfg!(feature = "opencl") { " and opencl:N" } else { "" }
        ))),
    }
}
