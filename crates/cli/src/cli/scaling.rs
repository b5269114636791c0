//! `arraybridge bench scaling detect|paco`: the same job on 1, 2, … workers, where workers are
//! devices in one process (`--device a,b`) and, with the `mpi` feature and `mpirun` on PATH,
//! MPI ranks (`mpirun -n k`, one device each). Every run is this program started as a child
//! process on generated input files (a synthetic movie, a synthetic ADI cube), timed end to end
//! as a user would run it (start, reading, kernel builds, work, writing); one warm-up run per
//! row, then the best of `--reps`. Per row: workers, wall time, speed-up T1/Tn, efficiency
//! T1/(n·Tn) and cost n·Tn/T1 (the device-seconds paid per device-second of one worker).

use crate::cli::common::outln;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use bridge_core::host::{check_allocation, checked_product};
use bridge_core::{BridgeError, Device, Result};

use super::common::Global;
use super::device::{DETECT, DeviceArg, PACO, parse_device_arg};

/// The job `bench scaling` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScalingJob {
    /// `arraybridge detect` (method log, `--threshold none --threshold-rel 0.2`) on a synthetic
    /// u16 movie of `--frames` frames of `--size`² pixels.
    Detect,
    /// `arraybridge paco` (no sub-pixel templates) on a synthetic ADI cube of `--frames` frames
    /// of `--size`² pixels.
    Paco,
}

/// Arguments of `arraybridge bench scaling`.
#[derive(Debug, clap::Args)]
pub struct ScalingArgs {
    /// The job: `detect` or `paco`.
    #[arg(value_enum)]
    pub job: ScalingJob,
    /// The devices, one per worker: `all` (every GPU) or a list (`opencl:0,opencl:1`); the run
    /// with n workers takes the first n.
    #[arg(long, default_value = "all", value_parser = parse_device_arg)]
    pub device: DeviceArg,
    /// Worker counts to measure, comma-separated (each at most the number of devices).
    #[arg(long, value_delimiter = ',', default_value = "1,2",
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Vec<u64>,
    /// Frames of the generated movie or cube (default: 200 for detect, 40 for paco).
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=1_000_000))]
    pub frames: Option<u64>,
    /// Frame side in pixels (default: 256 for detect, 64 for paco).
    #[arg(long, value_parser = clap::value_parser!(u64).range(16..=65_536))]
    pub size: Option<u64>,
    /// Timed runs per row after one warm-up run (the best is reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub reps: u64,
    /// Skip the MPI rows even when `mpirun` is there.
    #[arg(long)]
    pub no_mpi: bool,
}

/// One measured row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// `devices` (several devices in one process) or `mpi` (ranks under mpirun).
    pub kind: &'static str,
    /// Workers (devices or ranks).
    pub workers: usize,
    /// The devices used, comma-separated.
    pub devices: String,
    /// Best wall time of the timed runs, seconds.
    pub best_s: f64,
    /// T1 / Tn (T1: the one-worker row of the same kind).
    pub speedup: f64,
    /// T1 / (n·Tn); 1.0 is perfect scaling.
    pub efficiency: f64,
    /// n·Tn / T1: worker-seconds paid per worker-second of one worker (1.0 is perfect).
    pub cost: f64,
}

/// Fill in speed-up, efficiency and cost of `rows` (one kind) from their one-worker row.
pub fn ratios(rows: &mut [Row]) {
    let t1 = rows.iter().find(|r| r.workers == 1).map(|r| r.best_s);
    for r in rows {
        let (n, tn) = (r.workers as f64, r.best_s);
        match t1 {
            Some(t1) if tn > 0.0 && t1 > 0.0 => {
                r.speedup = t1 / tn;
                r.efficiency = t1 / (n * tn);
                r.cost = n * tn / t1;
            }
            _ => (r.speedup, r.efficiency, r.cost) = (f64::NAN, f64::NAN, f64::NAN),
        }
    }
}

/// The generated inputs (removed when dropped).
struct Inputs {
    dir: PathBuf,
    /// The job's arguments before `--device` (inputs and output).
    args: Vec<String>,
}

impl Drop for Inputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_inputs(job: ScalingJob, frames: usize, size: usize) -> Result<Inputs> {
    let dir = std::env::temp_dir().join(format!("arraybridge-scaling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| BridgeError::io(dir.display().to_string(), e))?;
    let s = |p: &Path| p.display().to_string();
    let mut inputs = Inputs {
        dir: dir.clone(),
        args: Vec::new(),
    };
    inputs.args = match job {
        ScalingJob::Detect => {
            let particles = ((size.saturating_sub(17)).pow(2) / 100).min(200);
            let synth = algorithms::detect::synth::synthetic_movie(frames, size, particles, 1.0, 1);
            let algorithms::detect::Movie::U16(m) = &synth.movie else {
                return Err(BridgeError::Unsupported(
                    "the synthetic movie is not u16".into(),
                ));
            };
            let payload: Vec<u8> = m.iter().flat_map(|v| v.to_le_bytes()).collect();
            let bytes = arraybridge::io::npy::encode_npy("<u2", &[frames, size, size], &payload);
            let movie = dir.join("movie.npy");
            std::fs::write(&movie, bytes).map_err(|e| BridgeError::io(s(&movie), e))?;
            vec![
                "detect".into(),
                s(&movie),
                "-o".into(),
                s(&dir.join("out.csv")),
                "--threshold".into(),
                "none".into(),
                "--threshold-rel".into(),
                "0.2".into(),
                "--max-sigma".into(),
                "4".into(),
            ]
        }
        ScalingJob::Paco => {
            let (cube, angles, psf) = algorithms::paco::bench::synthetic_adi(frames, size, 7);
            let write = |name: &str, a: ndarray::ArrayD<f64>| -> Result<String> {
                let p = dir.join(name);
                arraybridge::io::fits::write_image(&p, &a)?;
                Ok(s(&p))
            };
            let cube = write("cube.fits", cube.into_dyn())?;
            let angles = write("angles.fits", angles.into_dyn())?;
            let psf = write("psf.fits", psf.into_dyn())?;
            vec![
                "paco".into(),
                "--cube".into(),
                cube,
                "--angles".into(),
                angles,
                "--psf".into(),
                psf,
                "-o".into(),
                s(&dir.join("out")),
            ]
        }
    };
    Ok(inputs)
}

/// Best wall time of `reps` runs of `cmd()` after one warm-up run; a failed run is an error
/// with its stderr.
fn best_of(reps: usize, what: &str, mut cmd: impl FnMut() -> Command) -> Result<f64> {
    let mut best = f64::INFINITY;
    for i in 0..=reps {
        let t = Instant::now();
        let out = cmd()
            .output()
            .map_err(|e| BridgeError::io(what.to_string(), e))?;
        let secs = t.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(BridgeError::InvalidInput(
                format!(
                    "bench scaling: `{what}` failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )
                .into(),
            ));
        }
        if i > 0 {
            best = best.min(secs);
        }
    }
    Ok(best)
}

/// Whether `mpirun` runs (`mpirun --version`).
#[cfg(feature = "mpi")]
fn have_mpirun() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn names(devices: &[Device]) -> String {
    devices
        .iter()
        .map(Device::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// One `bench scaling` run: the job, its generated inputs (removed when dropped) and the
/// workers to measure.
struct Scaling {
    /// `detect` or `paco`.
    job: &'static str,
    /// Frames of the generated movie or cube.
    frames: usize,
    /// Its frame side in pixels.
    size: usize,
    /// Timed runs per row.
    reps: usize,
    /// The devices, one per worker.
    devices: Vec<Device>,
    /// The worker counts to measure, ascending, 1 among them.
    workers: Vec<usize>,
    /// This program, run as the child processes.
    exe: PathBuf,
    /// The job's inputs and arguments.
    inputs: Inputs,
}

/// Run `arraybridge bench scaling`: the checks and the generated inputs, the rows of devices in
/// one process, the rows of MPI ranks (or why they are skipped), then the table or JSON.
pub fn run(a: ScalingArgs, g: Global) -> Result<()> {
    let s = Scaling::new(&a)?;
    g.note(format!(
        "bench scaling {}: {}x{}x{}, workers {:?} of {}, warm-up + best of {}",
        s.job,
        s.frames,
        s.size,
        s.size,
        s.workers,
        names(&s.devices),
        s.reps
    ));
    let mut rows: Vec<Row> = Vec::new();
    rows.extend(s.device_rows(g)?);
    let mut skipped: Vec<String> = Vec::new();
    if a.no_mpi {
        skipped.push("mpi ranks: skipped: --no-mpi".into());
    } else {
        #[cfg(not(feature = "mpi"))]
        skipped.push("mpi ranks: skipped: built without the `mpi` feature".into());
        #[cfg(feature = "mpi")]
        if !have_mpirun() {
            skipped.push("mpi ranks: skipped: no mpirun".into());
        } else {
            rows.extend(s.mpi_rows(g)?);
        }
    }
    s.print(g, &rows, &skipped)
}

impl Scaling {
    /// The job's sizes and devices, checked (no more workers than devices, the inputs within
    /// the memory budget), then its inputs written.
    fn new(a: &ScalingArgs) -> Result<Scaling> {
        let (stage, frames, size) = match a.job {
            ScalingJob::Detect => (DETECT, a.frames.unwrap_or(200), a.size.unwrap_or(256)),
            ScalingJob::Paco => (PACO, a.frames.unwrap_or(40), a.size.unwrap_or(64)),
        };
        if a.job == ScalingJob::Paco && size < 21 {
            return Err(BridgeError::invalid_argument(
                "--size",
                format!(
                    "{size}: bench scaling paco needs frames of at least 21×21 pixels (the \
                         synthetic cube's PSF is 21×21)"
                ),
            ));
        }
        let devices = match &a.device {
            DeviceArg::Explicit(d) => vec![*d],
            // `auto` measures every GPU: say so when there is none (the message of `all`
            // would tell the user to try `auto`)
            DeviceArg::Auto => DeviceArg::AllGpus
                .devices(stage)
                .map_err(|e| {
                    BridgeError::invalid_argument(
                        "--device",
                        format!(
                            "auto: bench scaling measures the GPUs of this machine, and found \
                             none ({e}); name the devices to measure, e.g. --device \
                             opencl:0,opencl:1"
                        ),
                    )
                })?
                .unwrap_or_default(),
            other => other.devices(stage)?.unwrap_or_default(),
        };
        let mut workers: Vec<usize> = a.workers.iter().map(|&w| w as usize).collect();
        workers.sort_unstable();
        workers.dedup();
        if let Some(&most) = workers.last()
            && most > devices.len()
        {
            return Err(BridgeError::invalid_argument(
                "--workers",
                format!(
                    "{most} workers need {most} devices; --device {} gives {} ({}); name more \
                     devices or measure fewer workers",
                    a.device,
                    devices.len(),
                    names(&devices)
                ),
            ));
        }
        if !workers.contains(&1) {
            workers.insert(0, 1);
        }
        let bytes = checked_product(&[frames, size, size, 8, 4]).unwrap_or(u64::MAX);
        check_allocation(
            bytes,
            &format!("bench scaling --frames {frames} --size {size}"),
            "use fewer frames or a smaller --size",
        )?;
        let (frames, size) = (
            usize::try_from(frames).unwrap_or(usize::MAX),
            usize::try_from(size).unwrap_or(usize::MAX),
        );
        let reps = usize::try_from(a.reps).unwrap_or(1);
        let inputs = write_inputs(a.job, frames, size)?;
        let exe = std::env::current_exe().map_err(|e| BridgeError::io("current executable", e))?;
        let job = match a.job {
            ScalingJob::Detect => "detect",
            ScalingJob::Paco => "paco",
        };
        Ok(Scaling {
            job,
            frames,
            size,
            reps,
            devices,
            workers,
            exe,
            inputs,
        })
    }

    /// A row of `n` workers (the first `n` devices) before its ratios.
    fn row(&self, kind: &'static str, n: usize, best_s: f64) -> Row {
        Row {
            kind,
            workers: n,
            devices: names(&self.devices[..n]),
            best_s,
            speedup: f64::NAN,
            efficiency: f64::NAN,
            cost: f64::NAN,
        }
    }

    /// The rows of 1, 2, … devices in one process (`--device a,b`), with their ratios.
    fn device_rows(&self, g: Global) -> Result<Vec<Row>> {
        let (exe, inputs, reps) = (&self.exe, &self.inputs, self.reps);
        let mut device_rows = Vec::new();
        for &n in &self.workers {
            let list = names(&self.devices[..n]);
            let what = format!(
                "{} {} --device {list}",
                exe.display(),
                inputs.args.join(" ")
            );
            let best = best_of(reps, &what, || {
                let mut c = Command::new(exe);
                c.arg("-q").args(&inputs.args).args(["--device", &list]);
                c
            })?;
            g.note(format!("  {n} device(s) {list}: {best:.3} s"));
            device_rows.push(self.row("devices", n, best));
        }
        ratios(&mut device_rows);
        Ok(device_rows)
    }

    /// The rows of 1, 2, … MPI ranks (`mpirun -n k`, one device each), with their ratios.
    #[cfg(feature = "mpi")]
    fn mpi_rows(&self, g: Global) -> Result<Vec<Row>> {
        let (exe, inputs, reps) = (&self.exe, &self.inputs, self.reps);
        let mut mpi_rows = Vec::new();
        for &n in &self.workers {
            let list = names(&self.devices[..n]);
            let what = format!(
                "mpirun -n {n} {} {} --device {list}",
                exe.display(),
                inputs.args.join(" ")
            );
            let best = best_of(reps, &what, || {
                let mut c = Command::new("mpirun");
                c.args(["-n", &n.to_string()])
                    .arg(exe)
                    .arg("-q")
                    .args(&inputs.args)
                    .args(["--device", &list])
                    // Open MPI: as root too, more ranks than cores, no cross-memory attach
                    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                    .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
                    .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
                c
            })?;
            g.note(format!("  {n} rank(s) on {list}: {best:.3} s"));
            mpi_rows.push(self.row("mpi", n, best));
        }
        ratios(&mut mpi_rows);
        Ok(mpi_rows)
    }

    /// The rows as JSON with `--json`, else as a Markdown table, then what was skipped.
    fn print(&self, g: Global, rows: &[Row], skipped: &[String]) -> Result<()> {
        let Scaling {
            job,
            frames,
            size,
            reps,
            ref devices,
            ..
        } = *self;
        if g.json {
            return g.print_json(&serde_json::json!({
                "command": "bench scaling", "job": job, "frames": frames, "size": size,
                "reps": reps, "devices": names(devices), "rows": rows, "skipped": skipped,
            }));
        }
        outln!(
            "| kind | workers | devices | best s | speed-up T1/Tn | efficiency T1/(n·Tn) | cost n·Tn/T1 |"
        )?;
        outln!("|---|---|---|---|---|---|---|")?;
        for r in rows {
            outln!(
                "| {} | {} | {} | {:.3} | {:.2} | {:.2} | {:.2} |",
                r.kind,
                r.workers,
                r.devices,
                r.best_s,
                r.speedup,
                r.efficiency,
                r.cost
            )?;
        }
        for s in skipped {
            outln!("{s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workers: usize, best_s: f64) -> Row {
        Row {
            kind: "devices",
            workers,
            devices: String::new(),
            best_s,
            speedup: 0.0,
            efficiency: 0.0,
            cost: 0.0,
        }
    }

    #[test]
    fn ratios_follow_the_one_worker_row() {
        let mut rows = vec![row(1, 10.0), row(2, 6.0), row(4, 2.5)];
        ratios(&mut rows);
        assert!((rows[0].speedup - 1.0).abs() < 1e-12 && (rows[0].cost - 1.0).abs() < 1e-12);
        assert!((rows[1].speedup - 10.0 / 6.0).abs() < 1e-12);
        assert!((rows[1].efficiency - 10.0 / 12.0).abs() < 1e-12);
        assert!((rows[1].cost - 1.2).abs() < 1e-12);
        assert!((rows[2].efficiency - 1.0).abs() < 1e-12);
        let mut none = vec![row(2, 1.0)];
        ratios(&mut none);
        assert!(none[0].speedup.is_nan());
    }
}
