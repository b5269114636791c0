//! What every command shares: the global `--quiet`/`--json` switches, output checks that run
//! before any work, and progress bars.
//!
//! The grammar, for every command:
//! * `-o, --output PATH`: the file (detect, track) or folder (paco, demo) written; checked before
//!   the inputs are read ([`check_output_file`], [`check_output_dir`]): its folder must exist
//!   and be writable, and it may never be one of the inputs.
//! * `-q, --quiet`: no progress bars, notes or summaries on stderr (errors are still printed).
//! * `--json`: the result as one JSON document on stdout instead of a table or a summary line.
//! * `--device auto|cpu|cuda:N|opencl:N`, default `auto` ([`super::device`]).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bridge_core::{BridgeError, Result};
use indicatif::{ProgressBar, ProgressStyle};

/// Switches every command accepts (clap `global` arguments: before or after the command name).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global {
    /// `--quiet`.
    pub quiet: bool,
    /// `--json`.
    pub json: bool,
}

impl Global {
    /// Print a note on stderr unless `--quiet`.
    pub fn note(&self, msg: impl std::fmt::Display) {
        if !self.quiet {
            to_stderr(format_args!("{msg}"));
        }
    }

    /// A progress bar over `total` items, hidden with `--quiet` or when stderr is not a terminal.
    pub fn progress(&self, total: u64, unit: &str) -> ProgressBar {
        if self.quiet || !std::io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let style = ProgressStyle::with_template(&format!(
            "{{bar:30}} {{pos}}/{{len}} {unit}, {{per_sec}}, {{elapsed}} (eta {{eta}})"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        ProgressBar::new(total).with_style(style)
    }

    /// A spinner that shows the current stage of a long command (hidden like [`Self::progress`]).
    pub fn spinner(&self) -> ProgressBar {
        if self.quiet || !std::io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new_spinner();
        pb.enable_steady_tick(Duration::from_millis(120));
        pb
    }

    /// A spinner for a command made of stages: [`Stages::say`] prints each stage's line (as
    /// [`Self::note`] does) and shows it beside the spinner while it runs.
    pub fn stages(&self) -> Stages {
        Stages {
            pb: self.spinner(),
            g: *self,
        }
    }

    /// Print `value` as pretty JSON on stdout.
    pub fn print_json(&self, value: &serde_json::Value) -> Result<()> {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| BridgeError::InvalidInput(format!("JSON output: {e}").into()))?;
        to_stdout(&format!("{text}\n"))
    }
}

/// What [`to_stdout`] names in its error: with [`BridgeError::Io`] and a closed pipe
/// ([`std::io::ErrorKind::BrokenPipe`]), `main` ends quietly with 141 (128 + SIGPIPE, as a
/// program the pipe's signal ends).
pub const STDOUT: &str = "standard output";

/// Write `text` to stdout and flush it: a closed pipe or a full disk is a
/// [`BridgeError::Io`] on [`STDOUT`] (where `println!` would panic).
pub fn to_stdout(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| BridgeError::Io {
            path: STDOUT.into(),
            source,
        })
}

/// `println!` that returns [`to_stdout`]'s error (a closed pipe, a full disk) instead of
/// panicking: `outln!(...)?`.
macro_rules! outln {
    () => {
        $crate::cli::common::to_stdout("\n")
    };
    ($($arg:tt)*) => {
        $crate::cli::common::to_stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// `print!` that returns [`to_stdout`]'s error instead of panicking: `outp!(...)?`.
macro_rules! outp {
    ($($arg:tt)*) => {
        $crate::cli::common::to_stdout(&format!($($arg)*))
    };
}
pub(crate) use outp;

/// Write a line to stderr; a closed or full stderr is ignored (there is nowhere to say so),
/// where `eprintln!` would panic.
pub fn to_stderr(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(line).and_then(|()| err.write_all(b"\n"));
}

/// The stages of a long command on stderr (see [`Global::stages`]).
#[derive(Debug)]
pub struct Stages {
    pb: ProgressBar,
    g: Global,
}

impl Stages {
    /// Print the line of a new stage (unless `--quiet`) and show it beside the spinner.
    pub fn say(&self, msg: impl std::fmt::Display) {
        let msg = msg.to_string();
        if self.pb.is_hidden() {
            self.g.note(msg);
        } else {
            self.pb.println(&msg);
            self.pb.set_message(msg);
        }
    }

    /// Remove the spinner (before the command prints its result).
    pub fn finish(&self) {
        self.pb.finish_and_clear();
    }
}

/// The identity of a file: (device, inode) where the platform has them, else the canonical path.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return ma.dev() == mb.dev() && ma.ino() == mb.ino();
        }
    }
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// True when `path` is `input` or lies inside it (an input folder of frames).
fn inside(path: &Path, input: &Path) -> bool {
    if same_file(path, input) {
        return true;
    }
    let (Ok(p), Ok(i)) = (
        std::fs::canonicalize(path.parent().unwrap_or(Path::new("."))),
        std::fs::canonicalize(input),
    ) else {
        return false;
    };
    i.is_dir() && p.starts_with(&i)
}

/// The folder a file path lives in (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Check that `dir` accepts new files, by creating and removing a probe file.
fn check_writable(dir: &Path, flag: &str) -> Result<()> {
    let probe = dir.join(format!(".arraybridge-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(BridgeError::io(
            format!(
                "{} (the folder of {flag}; choose a folder you can write to)",
                dir.display()
            ),
            e,
        )),
    }
}

/// Check the output file of `flag` before any work: its folder exists and is writable, it is
/// not a folder, and it is none of `inputs` (nor inside an input folder). Nothing is created.
pub fn check_output_file(output: &Path, inputs: &[&Path], flag: &str) -> Result<()> {
    if output.as_os_str().is_empty() {
        return Err(BridgeError::invalid_argument(flag, "the path is empty"));
    }
    if output.is_dir() {
        return Err(BridgeError::invalid_argument(
            flag,
            format!(
                "{} is a folder; give a file name (e.g. {})",
                output.display(),
                output.join("out.csv").display()
            ),
        ));
    }
    for input in inputs {
        if inside(output, input) {
            return Err(BridgeError::invalid_argument(
                flag,
                format!(
                    "{} would overwrite the input {}; choose another output path",
                    output.display(),
                    input.display()
                ),
            ));
        }
    }
    let dir = parent_of(output);
    if dir.exists() && !dir.is_dir() {
        return Err(BridgeError::invalid_argument(
            flag,
            format!(
                "{} is a file, not a folder: {} cannot be written inside it",
                dir.display(),
                output.display()
            ),
        ));
    }
    if !dir.is_dir() {
        return Err(BridgeError::invalid_argument(
            flag,
            format!(
                "the folder {} does not exist; create it first (mkdir -p {})",
                dir.display(),
                dir.display()
            ),
        ));
    }
    if output.exists() {
        // An existing file is replaced: it must be writable (opened without truncating).
        std::fs::OpenOptions::new()
            .append(true)
            .open(output)
            .map_err(|e| {
                BridgeError::io(
                    format!(
                        "{} ({flag}; it exists and cannot be replaced)",
                        output.display()
                    ),
                    e,
                )
            })?;
        Ok(())
    } else {
        check_writable(&dir, flag)
    }
}

/// Check (and create) the output folder of `flag` before any work: it is writable, and none of
/// the `files` that will be written in it is one of `inputs`.
pub fn check_output_dir(dir: &Path, files: &[&str], inputs: &[&Path], flag: &str) -> Result<()> {
    if dir.as_os_str().is_empty() {
        return Err(BridgeError::invalid_argument(flag, "the path is empty"));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(BridgeError::invalid_argument(
            flag,
            format!("{} exists and is not a folder", dir.display()),
        ));
    }
    for input in inputs {
        if same_file(dir, input) {
            return Err(BridgeError::invalid_argument(
                flag,
                format!("{} is the input {}", dir.display(), input.display()),
            ));
        }
        for f in files {
            let out = dir.join(f);
            if same_file(&out, input) {
                return Err(BridgeError::invalid_argument(
                    flag,
                    format!(
                        "{} would overwrite the input {}; choose another output folder",
                        out.display(),
                        input.display()
                    ),
                ));
            }
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        BridgeError::io(
            format!("{} ({flag}: cannot create the folder)", dir.display()),
            e,
        )
    })?;
    check_writable(dir, flag)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ab-common-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn outputs_never_replace_inputs() {
        let d = tmp("files");
        let input = d.join("m.npy");
        std::fs::write(&input, b"x").unwrap();
        let e = check_output_file(&input, &[&input], "--output").unwrap_err();
        assert!(e.to_string().contains("overwrite the input"), "{e}");
        // The same file through another spelling of its path.
        let other = d.join(".").join("m.npy");
        assert!(check_output_file(&other, &[&input], "--output").is_err());
        // A hard link is the same file.
        let link = d.join("link.npy");
        std::fs::hard_link(&input, &link).unwrap();
        assert!(check_output_file(&link, &[&input], "--output").is_err());
        // A new file next to it is fine, and nothing is created by the check.
        let out = d.join("out.csv");
        check_output_file(&out, &[&input], "--output").unwrap();
        assert!(!out.exists());
        // Folder outputs: a file that will be written there may not be an input.
        let e = check_output_dir(&d, &["m.npy"], &[&input], "--output").unwrap_err();
        assert!(e.to_string().contains("overwrite the input"), "{e}");
        check_output_dir(&d.join("sub"), &["m.npy"], &[&input], "--output").unwrap();
        assert!(d.join("sub").is_dir());
        // A file inside an input folder of frames.
        let frames = d.join("frames");
        std::fs::create_dir_all(&frames).unwrap();
        let e = check_output_file(&frames.join("x.csv"), &[&frames], "--output").unwrap_err();
        assert!(e.to_string().contains("overwrite the input"), "{e}");
    }

    #[test]
    fn output_folders_must_exist_and_be_files() {
        let d = tmp("dirs");
        let e = check_output_file(&d.join("nope/x.csv"), &[], "--output").unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = check_output_file(&d, &[], "--output").unwrap_err();
        assert!(e.to_string().contains("is a folder"), "{e}");
        let f = d.join("file");
        std::fs::write(&f, b"x").unwrap();
        let e = check_output_dir(&f, &[], &[], "--output").unwrap_err();
        assert!(e.to_string().contains("not a folder"), "{e}");
        check_output_file(Path::new("relative-name.csv"), &[], "--output").unwrap();
    }
}
