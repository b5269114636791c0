//! The `arraybridge` command-line tool.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut shown = e.to_string();
            eprintln!("error: {shown}");
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
            ExitCode::FAILURE
        }
    }
}
