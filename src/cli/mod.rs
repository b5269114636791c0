//! Command-line interface: one module per subcommand.
//!
//! To add a subcommand: create `src/cli/NAME.rs` with a `#[derive(clap::Args)] pub struct Args`
//! and `pub fn run(args: Args) -> bridge_core::Result<()>`, add `mod NAME;` below, one variant to
//! [`Command`] and one arm to [`run`].

use clap::{Parser, Subcommand};

mod devices;

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
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> bridge_core::Result<()> {
    match cli.command {
        Command::Devices(a) => devices::run(a),
    }
}
