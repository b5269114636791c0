//! Command-line parsing of every command: arbitrary argument lists (NUL-separated in the input)
//! through the real parser and its value parsers. Parsing must end in `Ok` or a clap error.
#![no_main]

use arraybridge_cli::Cli;
use clap::Parser;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let args = std::iter::once("arraybridge").chain(text.split('\0'));
    let _ = Cli::try_parse_from(args);
});
