//! # arraybridge-cli
//!
//! The `arraybridge` command-line tool (`detect`, `track`, `paco`, `demo`, `bench`,
//! `devices`) over the [`arraybridge`] library: the library has no command-line
//! dependencies (no clap, indicatif or png), and this crate holds the grammar, the commands,
//! the figures they draw and the MPI driver. The binary is `src/main.rs`, one call to [`main`];
//! the library target exists so that the fuzzers parse with the real grammar ([`Cli`]) and
//! tests can run a command in their own process ([`run`]).

use std::process::ExitCode;

use clap::Parser;

mod cli;
pub mod figures;

pub use cli::{Cli, run};

/// The `arraybridge` command line: parses the arguments of this process, runs the command,
/// prints an error (with the causes its message does not already name) and returns the exit
/// status. Under `mpirun` (feature `mpi`) it initialises MPI first and ends every rank when one
/// fails.
pub fn main() -> ExitCode {
    let args = cli::Cli::parse();
    #[cfg(feature = "mpi")]
    let _universe = match cli::mpi::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut shown = e.to_string();
            #[cfg(feature = "mpi")]
            let rank = cli::mpi::place()
                .map(|p| format!(" (rank {} of {})", p.rank, p.size))
                .unwrap_or_default();
            #[cfg(not(feature = "mpi"))]
            let rank = "";
            eprintln!("error{rank}: {shown}");
            // Causes the message does not already include (an i/o error names its OS error).
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                let text = s.to_string();
                if !shown.contains(&text) {
                    eprintln!("  caused by: {text}");
                    shown.push_str(&text);
                }
                source = s.source();
            }
            // the other ranks may wait for this one: end them all
            #[cfg(feature = "mpi")]
            if cli::mpi::place().is_some() && !cli::mpi::released() {
                cli::mpi::abort(1);
            }
            ExitCode::FAILURE
        }
    }
}
