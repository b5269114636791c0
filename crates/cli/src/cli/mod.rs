//! Command-line interface: one module per subcommand.
//!
//! To add a subcommand: create `src/cli/NAME.rs` with a `#[derive(clap::Args)] pub struct Args`
//! and `pub fn run(args: Args, g: Global) -> bridge_core::Result<()>`, add `mod NAME;` below, one
//! variant to [`Command`] and one arm to [`run`]. Use the shared grammar of [`common`] and
//! [`device`]: `-o/--output`, `--device` (default `auto`), the global `--quiet` and `--json`.

use clap::{Parser, Subcommand};

mod bench;
mod bench_volume;
pub mod common;
mod demo;
mod detect;
pub mod device;
mod devices;
#[cfg(feature = "mpi")]
pub mod mpi;
mod paco;
mod scaling;
mod track;

/// arraybridge: move n-dimensional arrays between host and GPU frameworks and run scientific
/// pipelines on whichever device is enabled.
#[derive(Debug, Parser)]
#[command(name = "arraybridge", version, about, long_about = None)]
pub struct Cli {
    /// No progress bars, notes or summaries on stderr (errors are still printed).
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    /// Print the result as one JSON document on stdout (instead of a table or summary).
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every device every compiled-in backend sees, and which backends are unavailable.
    Devices(devices::Args),
    /// Benchmarks printed as tables (`bench transfer`, ...).
    Bench(bench::Args),
    /// PACO exoplanet detection on an ADI cube (FITS in, S/N and flux maps out).
    Paco(paco::Args),
    /// Detect particles in a movie (LoG blob_log or trackpy locate) and write a CSV.
    Detect(Box<detect::Args>),
    /// Link detections into trajectories (trackpy link semantics) and add a `particle` column.
    Track(track::Args),
    /// End to end on generated data: detection + tracking and PACO on the best device, figures.
    Demo(demo::Args),
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> bridge_core::Result<()> {
    // the edge: the environment's memory limit (one that does not parse is refused, not
    // ignored) and tuning knobs, read once here and handed to the library as values
    let tuning = bridge_core::tuning::Tuning::from_env();
    bridge_core::host::set_limit_mib(tuning.memory_limit_mib()?);
    // (a tuning already fixed, by a library call before this one, stays as it is)
    let _ = bridge_core::tuning::install(tuning);
    #[cfg(feature = "mpi")]
    if let Some(p) = mpi::place()
        && !matches!(cli.command, Command::Paco(_) | Command::Detect(_))
    {
        return Err(bridge_core::BridgeError::invalid_argument(
            "mpirun",
            format!(
                "{} ranks: only `paco` and `detect` run across MPI ranks; run this command without mpirun",
                p.size
            ),
        ));
    }
    let g = common::Global {
        quiet: cli.quiet,
        json: cli.json,
    };
    match cli.command {
        Command::Devices(a) => devices::run(a, g),
        Command::Bench(a) => bench::run(a, g),
        Command::Paco(a) => paco::run(a, g),
        Command::Detect(a) => detect::run(*a, g),
        Command::Track(a) => track::run(a, g),
        Command::Demo(a) => demo::run(a, g),
    }
}
