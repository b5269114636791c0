//! # arraybridge-cli
//!
//! The `arraybridge` command-line tool (`detect`, `track`, `paco`, `demo`, `bench`,
//! `devices`) over the [`arraybridge`] library: the library has no command-line
//! dependencies (no clap, indicatif or png), and this crate holds the grammar, the commands,
//! the figures they draw and the MPI driver. The binary is `src/main.rs`, one call to [`main`];
//! the library target exists so that the fuzzers parse with the real grammar ([`Cli`]) and
//! tests can run a command in their own process ([`run`]).

use std::process::ExitCode;

use bridge_core::BridgeError;
use clap::Parser;

mod cli;
pub mod figures;

pub use cli::{Cli, run};

/// The `arraybridge` command line: parses the arguments of this process, runs the command,
/// prints an error (with the causes its message does not already name) and returns the exit
/// status. Under `mpirun` (feature `mpi`) it initialises MPI first and ends every rank when one
/// fails. On SIGINT, SIGTERM or SIGHUP (Unix: Ctrl-C, `kill`, a closed terminal) it deletes
/// the temporary files of the outputs being written (an existing output stays as it was) and
/// exits with 128 + the signal (130, 143, 129). A closed standard output (`| head -1`) ends it
/// quietly with 141.
pub fn main() -> ExitCode {
    let args = match cli::Cli::try_parse() {
        Ok(args) => args,
        // `--help`, `--version` and usage errors, printed as clap prints them; a write that
        // fails (`--help > /dev/full`) is an error too, where clap's own exit ignores it
        Err(e) => {
            let code = e.exit_code();
            let printed = e
                .print()
                .and_then(|()| std::io::Write::flush(&mut std::io::stdout()));
            if let Err(w) = printed {
                if w.kind() == std::io::ErrorKind::BrokenPipe {
                    return ExitCode::from(141);
                }
                cli::common::to_stderr(format_args!("error: writing the help: {w}"));
                return ExitCode::FAILURE;
            }
            return ExitCode::from(u8::try_from(code).unwrap_or(2));
        }
    };
    install_logger(args.quiet);
    #[cfg(feature = "mpi")]
    let _universe = match cli::mpi::init() {
        Ok(u) => u,
        Err(e) => {
            cli::common::to_stderr(format_args!("error: {e}"));
            return ExitCode::FAILURE;
        }
    };
    // after MPI's initialisation: a handler it installed is kept and still called
    #[cfg(unix)]
    remove_partial_outputs_on_signals();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        // the reader of a pipe went away (`| head -1`): end quietly, as the pipe's signal
        // would end a program that did not catch it
        Err(BridgeError::Io { path, source })
            if path == cli::common::STDOUT && source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            ExitCode::from(141)
        }
        Err(e) => {
            let mut shown = e.to_string();
            #[cfg(feature = "mpi")]
            let rank = cli::mpi::place()
                .map(|p| format!(" (rank {} of {})", p.rank, p.size))
                .unwrap_or_default();
            #[cfg(not(feature = "mpi"))]
            let rank = "";
            cli::common::to_stderr(format_args!("error{rank}: {shown}"));
            // Causes the message does not already include (an i/o error names its OS error).
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                let text = s.to_string();
                if !shown.contains(&text) {
                    cli::common::to_stderr(format_args!("  caused by: {text}"));
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

/// On SIGINT, SIGTERM or SIGHUP, delete the temporary files of the open outputs
/// ([`arraybridge::io::staged::remove_open_staging_files`]) and exit with 128 + the signal,
/// from a thread of its own (the handler itself only wakes it). The exit is `_exit`: no
/// destructor or `atexit` handler (device drivers) runs while other threads may still use
/// them. Without the handler (it could not be installed: a warning), a signal ends the process
/// as before, leaving its temporary files to the next run's sweep.
#[cfg(unix)]
fn remove_partial_outputs_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("no SIGINT/SIGTERM/SIGHUP handler: {e}");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                arraybridge::io::staged::remove_open_staging_files();
                signal_hook::low_level::exit(128 + signal);
            }
        });
    if let Err(e) = spawned {
        log::warn!("no SIGINT/SIGTERM/SIGHUP handler thread: {e}");
    }
}

/// The library's warnings (`log::warn!`: a tuning variable that is not understood, a signal
/// handler that could not be installed, a device's notes) on stderr as `warning: ...` lines;
/// with `--quiet`, errors only; each distinct message once. Without a logger they were lost.
fn install_logger(quiet: bool) {
    static LOGGER: StderrLogger = StderrLogger;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(if quiet {
            log::LevelFilter::Error
        } else {
            log::LevelFilter::Warn
        });
    }
}

/// See [`install_logger`].
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            // each distinct message once (the tuning variables are read more than once)
            static SHOWN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
            let text = record.args().to_string();
            if let Ok(mut shown) = SHOWN.lock() {
                if shown.contains(&text) {
                    return;
                }
                shown.push(text.clone());
            }
            let level = match record.level() {
                log::Level::Error => "error",
                log::Level::Warn => "warning",
                log::Level::Info => "info",
                log::Level::Debug => "debug",
                log::Level::Trace => "trace",
            };
            cli::common::to_stderr(format_args!("{level}: {text}"));
        }
    }

    fn flush(&self) {}
}
