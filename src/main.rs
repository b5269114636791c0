//! The `arraybridge` command-line tool.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
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
