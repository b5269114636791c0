//! Command-line interface: one module per subcommand.
//!
//! To add a subcommand: create `src/cli/NAME.rs` with a `#[derive(clap::Args)] pub struct Args`
//! and `pub fn run(args: Args) -> bridge_core::Result<()>`, add `mod NAME;` below, one variant to
//! [`Command`] and one arm to [`run`].

use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod detect;
mod devices;
mod paco;
mod track;

/// arraybridge: move n-dimensional arrays between host and GPU frameworks and run scientific
/// pipelines on whichever device is enabled.
#[derive(Debug, Parser)]
#[command(name = "arraybridge", version, about, long_about = None)]
pub struct Cli {
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
    Detect(detect::Args),
    /// Link detections into trajectories (trackpy link semantics) and add a `particle` column.
    Track(track::Args),
    /// End to end on generated data: detection + tracking and PACO on the best device, figures.
    Demo(demo::Args),
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> bridge_core::Result<()> {
    match cli.command {
        Command::Devices(a) => devices::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Paco(a) => paco::run(a),
        Command::Detect(a) => detect::run(a),
        Command::Track(a) => track::run(a),
        Command::Demo(a) => demo::run(a),
    }
}
