//! Several inputs (`--out-dir`): the output of each input, planned and checked before any
//! work; the inputs detected one after another, or handed out to the MPI ranks; each input's
//! report and the summary.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bridge_core::{BridgeError, Result};

#[cfg(feature = "mpi")]
use super::super::common::Global;
use super::super::common::check_output_dir;
#[cfg(feature = "mpi")]
use super::super::device::DETECT;
use super::detect_one;
use super::multi::Runner;
use super::{Job, Where, local_devices, method_name};

/// One input's line of a run over several inputs (summary, `--json`, and the message a worker
/// rank sends rank 0).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct FileReport {
    /// The input.
    input: String,
    /// The CSV written (nothing when it failed).
    output: String,
    /// Frames read.
    frames: usize,
    /// Detections written.
    detections: usize,
    /// The device(s), comma-separated.
    device: String,
    /// The MPI rank that did it (under mpirun).
    #[serde(skip_serializing_if = "Option::is_none")]
    rank: Option<usize>,
    /// Seconds from opening the input to the renamed CSV.
    seconds: f64,
    /// Why it failed (with `--keep-going`).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The output of every input, `DIR/<stem>.csv`, checked before any work: two inputs with the
/// same stem are an error, and no output may be an input. Creates `dir`.
pub(super) fn plan_outputs(dir: &Path, inputs: &[PathBuf]) -> Result<Vec<(PathBuf, PathBuf)>> {
    let mut names: Vec<String> = Vec::with_capacity(inputs.len());
    for input in inputs {
        let stem = input
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty() && !s.starts_with('.'))
            .ok_or_else(|| {
                BridgeError::invalid_argument(
                    "input",
                    format!("{} has no file name to name its output", input.display()),
                )
            })?;
        let name = format!("{stem}.csv");
        if let Some(k) = names.iter().position(|n| *n == name) {
            return Err(BridgeError::invalid_argument(
                "--out-dir",
                format!(
                    "{} and {} would both write {}; rename one of them or run them separately",
                    inputs[k].display(),
                    input.display(),
                    dir.join(&name).display()
                ),
            ));
        }
        names.push(name);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let input_refs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    check_output_dir(dir, &refs, &input_refs, "--out-dir")?;
    Ok(inputs
        .iter()
        .zip(&names)
        .map(|(i, n)| (i.clone(), dir.join(n)))
        .collect())
}

/// An error that names `input` (unless its message already does).
fn naming(input: &Path, e: BridgeError) -> BridgeError {
    let name = input.display().to_string();
    if e.to_string().contains(&name) {
        e
    } else {
        BridgeError::InvalidInput(format!("{name}: {e}").into())
    }
}

/// One input of several, detected into `output` (staged like every output: a failure leaves no
/// partial file). With `--keep-going` a failure is a report with its error; otherwise the
/// error, naming the input.
fn one_file(
    job: &Job<'_>,
    input: &Path,
    output: &Path,
    place: Where,
    rank: Option<usize>,
) -> Result<FileReport> {
    let start = Instant::now();
    // the CSV is staged (`io::staged`): renamed into place when complete, removed on a failure
    let r = detect_one(job, input, output, place);
    let mut report = FileReport {
        input: input.display().to_string(),
        rank,
        ..FileReport::default()
    };
    match r {
        Ok(done) => {
            report.output = output.display().to_string();
            report.frames = done.frames;
            report.detections = done.detections;
            report.device = match &done.runner {
                Runner::One(c) => c.device.to_string(),
                Runner::Several(m) => m.device_text(),
            };
            report.seconds = start.elapsed().as_secs_f64();
            Ok(report)
        }
        Err(e) => {
            let e = naming(input, e);
            if !job.args.keep_going {
                return Err(e);
            }
            job.g.note(format!("detect: failed (going on): {e}"));
            report.seconds = start.elapsed().as_secs_f64();
            report.error = Some(e.to_string());
            Ok(report)
        }
    }
}

/// Several inputs (`--out-dir`): one after another in this process, or handed out to the
/// ranks under mpirun.
pub(super) fn run_files(job: &Job<'_>, files: &[(PathBuf, PathBuf)]) -> Result<()> {
    let start = Instant::now();
    #[cfg(feature = "mpi")]
    if let Some(p) = super::super::mpi::place() {
        let reports = files_on_ranks(job, files, p)?;
        return summarise_files(job, &reports, start);
    }
    let several = local_devices(job)?;
    let mut reports = Vec::with_capacity(files.len());
    for (input, output) in files {
        reports.push(one_file(
            job,
            input,
            output,
            Where::Arg(several.clone()),
            None,
        )?);
    }
    summarise_files(job, &reports, start)
}

/// Under mpirun with several inputs: rank 0 hands out the inputs one at a time to whichever
/// rank asks (each rank reports its last input when it asks for the next) and detects inputs
/// itself too, on its own device; every rank reads its input and writes its CSV. Rank 0 gets
/// every report (in input order); the other ranks get an empty list.
#[cfg(feature = "mpi")]
fn files_on_ranks(
    job: &Job<'_>,
    files: &[(PathBuf, PathBuf)],
    p: super::super::mpi::Place,
) -> Result<Vec<FileReport>> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (device, how) = super::super::device::rank_device(&job.args.device, DETECT, p.local_rank)?;
    let quiet = Job {
        g: Global {
            quiet: true,
            json: false,
        },
        ..*job
    };
    if p.rank != 0 {
        let mut last = Vec::new();
        while let Some(i) = super::super::mpi::ask_file(&last)? {
            let (input, output) = files.get(i).ok_or_else(|| {
                BridgeError::backend("mpi", None, format!("rank 0 handed out input {i}"))
            })?;
            let r = one_file(
                &quiet,
                input,
                output,
                Where::Rank(device, how.clone()),
                Some(p.rank),
            )?;
            last = serde_json::to_vec(&(i, r)).unwrap_or_default();
        }
        return Ok(Vec::new());
    }
    job.g.note(format!(
        "detect: {} inputs over {} MPI ranks; rank 0 on {device} ({how}) hands them out and detects too",
        files.len(),
        p.size
    ));
    let next = AtomicUsize::new(0);
    let take = || {
        let i = next.fetch_add(1, Ordering::SeqCst);
        (i < files.len()).then_some(i)
    };
    let stop = AtomicBool::new(false);
    let reports: Mutex<Vec<Option<FileReport>>> = Mutex::new(vec![None; files.len()]);
    let put = |i: usize, r: FileReport| {
        if let Some(slot) = reports.lock().unwrap_or_else(|e| e.into_inner()).get_mut(i) {
            *slot = Some(r);
        }
    };
    std::thread::scope(|s| -> Result<()> {
        let server = s.spawn(|| -> Result<()> {
            let mut working = p.size - 1;
            while working > 0 {
                let Some((rank, last)) = super::super::mpi::file_request(&stop)? else {
                    return Ok(());
                };
                if !last.is_empty() {
                    let (i, r): (usize, FileReport) =
                        serde_json::from_slice(&last).map_err(|e| {
                            BridgeError::backend(
                                "mpi",
                                None,
                                format!("rank {rank} sent an unreadable report: {e}"),
                            )
                        })?;
                    put(i, r);
                }
                let i = take();
                if i.is_none() {
                    working -= 1;
                }
                super::super::mpi::give_file(rank, i)?;
            }
            Ok(())
        });
        let own = (|| -> Result<()> {
            while let Some(i) = take() {
                let (input, output) = &files[i];
                let r = one_file(
                    &quiet,
                    input,
                    output,
                    Where::Rank(device, how.clone()),
                    Some(0),
                )?;
                put(i, r);
            }
            Ok(())
        })();
        if own.is_err() {
            stop.store(true, Ordering::SeqCst);
        }
        let served = server.join().unwrap_or_else(|_| {
            Err(BridgeError::backend(
                "mpi",
                None,
                "the thread handing out inputs panicked",
            ))
        });
        own.and(served)
    })?;
    // every other rank has its last answer: an error now ends only this rank
    super::super::mpi::mark_released();
    let reports = reports.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(reports
        .into_iter()
        .zip(files)
        .map(|(r, (input, _))| {
            r.unwrap_or_else(|| FileReport {
                input: input.display().to_string(),
                error: Some("no rank reported it".into()),
                ..FileReport::default()
            })
        })
        .collect())
}

/// The summary of several inputs (one line or JSON entry per input); an error listing the
/// failed inputs when there are any.
fn summarise_files(job: &Job<'_>, reports: &[FileReport], start: Instant) -> Result<()> {
    #[cfg(feature = "mpi")]
    if super::super::mpi::place().is_some_and(|p| p.rank != 0) {
        return Ok(());
    }
    let g = job.g;
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| r.input.as_str())
        .collect();
    let secs = start.elapsed().as_secs_f64();
    let frames: usize = reports.iter().map(|r| r.frames).sum();
    let detections: usize = reports.iter().map(|r| r.detections).sum();
    if g.json {
        g.print_json(&serde_json::json!({
            "command": "detect",
            "method": method_name(job.args.method),
            "out_dir": job.args.out_dir.as_ref().map(|d| d.display().to_string()),
            "files": reports,
            "failed": failed,
            "frames": frames,
            "detections": detections,
            "seconds": secs,
        }))?;
    } else {
        g.note(format!(
            "detect: {} inputs ({} failed), {frames} frames, {detections} detections, {secs:.3} s, method {}",
            reports.len(),
            failed.len(),
            method_name(job.args.method)
        ));
        for r in reports {
            let by = |sep: &str| match r.rank {
                Some(k) => format!("rank {k}{sep}"),
                None => String::new(),
            };
            match &r.error {
                None => g.note(format!(
                    "  {} → {}: {} frames, {} detections, {}{}, {:.3} s",
                    r.input,
                    r.output,
                    r.frames,
                    r.detections,
                    by(" "),
                    r.device,
                    r.seconds
                )),
                Some(e) => g.note(format!(
                    "  {}: FAILED ({}{:.3} s): {e}",
                    r.input,
                    by(", "),
                    r.seconds
                )),
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BridgeError::InvalidInput(
            format!(
                "{} of {} inputs failed: {}",
                failed.len(),
                reports.len(),
                failed.join(", ")
            )
            .into(),
        ))
    }
}
