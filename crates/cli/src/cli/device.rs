//! `--device`: one parser and one `auto` policy for every command.
//!
//! * `--device auto` (the default of every command) runs [`bridge_core::offload::decide`] over
//!   the devices of [`arraybridge::registry`] that the stage has a back end for, and prints the
//!   choice with its reason (unless `--quiet`). When the chosen device then fails, the stage is
//!   rerun on the CPU, loudly ([`Choice::fell_back`]): `auto` is the opt-in to that fallback.
//! * An explicit device (`cpu`, `cuda:N`, `opencl:N`) must exist and have a back end for every
//!   stage of the command; otherwise the command fails before doing any work, naming what is
//!   available. There is no silent fallback.
//!
//! The value is checked by the argument parser: `--device gpu` is a usage error.

use crate::cli::common::to_stderr;
use std::time::Instant;

use algorithms::detect::{CpuBackend, LogDetector, Movie};
use arraybridge::core::offload::{CpuProfile, OffloadDecision, Workload};
use bridge_core::{BridgeError, Device, Result};
use ndarray::s;

/// What `--device` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceArg {
    /// Let the offload decision choose, per stage.
    Auto,
    /// This device, or fail.
    Explicit(Device),
    /// These devices at once (`cuda:0,cuda:1`), each checked; work goes to whichever is free.
    Several(Vec<Device>),
    /// Every usable GPU of the compiled-in backends (`all`; CPU OpenCL devices are not GPUs).
    AllGpus,
}

impl std::fmt::Display for DeviceArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceArg::Auto => f.write_str("auto"),
            DeviceArg::Explicit(d) => write!(f, "{d}"),
            DeviceArg::Several(v) => {
                let names: Vec<String> = v.iter().map(Device::to_string).collect();
                f.write_str(&names.join(","))
            }
            DeviceArg::AllGpus => f.write_str("all"),
        }
    }
}

impl DeviceArg {
    /// For a command that runs on one device: `Several`/`AllGpus` are an error saying which
    /// command takes several.
    pub fn single(self, command: &str) -> Result<DeviceArg> {
        match self {
            DeviceArg::Auto | DeviceArg::Explicit(_) => Ok(self),
            DeviceArg::Several(_) | DeviceArg::AllGpus => Err(several_error(&self, command)),
        }
    }

    /// The devices of `Several` (each checked for `stage`) or `AllGpus` (every CUDA device and
    /// every OpenCL device that is not a CPU; an error when there is none); `None` for one
    /// device or `auto`.
    pub fn devices(&self, stage: Stage) -> Result<Option<Vec<Device>>> {
        match self {
            DeviceArg::Auto | DeviceArg::Explicit(_) => Ok(None),
            DeviceArg::Several(v) => {
                for &d in v {
                    check_explicit(d, &[stage])?;
                }
                Ok(Some(v.clone()))
            }
            DeviceArg::AllGpus => {
                let (gpus, notes) =
                    arraybridge::runtime::gpus(&stage.supports, stage.same_arithmetic);
                for note in notes {
                    to_stderr(format_args!("--device all: {note}"));
                }
                if gpus.is_empty() {
                    return Err(BridgeError::unavailable(
                        "gpu",
                        format!(
                            "--device all found no GPU for {} (devices: {}); name devices with \
                             --device a,b or use --device auto",
                            stage.name,
                            available_devices().join(", ")
                        ),
                    ));
                }
                Ok(Some(gpus))
            }
        }
    }
}

/// The one device of a process that runs with other ranks under MPI, from its node-local rank
/// `local`: `--device X` is X on every rank; a list (`a,b`) or `all` gives entry `local mod n`;
/// `auto` gives GPU `local mod n` of this node's GPUs (as `all` lists them), or the CPU when the
/// node has none. Returns the device and how it was chosen.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn rank_device(arg: &DeviceArg, stage: Stage, local: usize) -> Result<(Device, String)> {
    let pick = |v: &[Device], what: &str| match v.get(local % v.len().max(1)) {
        Some(&d) => Ok((d, format!("{what}, node-local rank {local}"))),
        None => Err(BridgeError::invalid_argument(
            "--device",
            "no device to choose from",
        )),
    };
    match arg {
        DeviceArg::Explicit(d) => {
            check_explicit(*d, &[stage])?;
            Ok((*d, "--device".into()))
        }
        DeviceArg::Several(_) | DeviceArg::AllGpus => {
            let v = arg.devices(stage)?.unwrap_or_default();
            pick(&v, &format!("--device {arg}"))
        }
        DeviceArg::Auto => match DeviceArg::AllGpus.devices(stage) {
            Ok(Some(v)) if !v.is_empty() => pick(&v, "auto: this node's GPUs"),
            _ => Ok((Device::Cpu, "auto: no GPU on this node".into())),
        },
    }
}

/// The error for several devices where one is needed.
pub fn several_error(arg: &DeviceArg, command: &str) -> BridgeError {
    BridgeError::invalid_argument(
        "--device",
        format!(
            "`{command}` runs on one device; several devices (--device {arg}) are supported by \
             `detect` (both methods), `paco` and `demo`, and timed on 1, 2, … of them by \
             `arraybridge bench scaling detect|paco --device {arg}`"
        ),
    )
}

/// The `--device` value parser: `auto`, `cpu`, `cuda:N` or `opencl:N` (case-insensitive), a
/// comma-separated list of those devices (`opencl:0,opencl:1`), or `all` (every GPU).
pub fn parse_device_arg(s: &str) -> std::result::Result<DeviceArg, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(DeviceArg::Auto);
    }
    if t.eq_ignore_ascii_case("all") {
        return Ok(DeviceArg::AllGpus);
    }
    if t.contains(',') {
        let mut v: Vec<Device> = Vec::new();
        for part in t.split(',') {
            match parse_device_arg(part)? {
                DeviceArg::Explicit(d) if v.contains(&d) => {
                    return Err(format!("{d} is named twice in {t:?}"));
                }
                DeviceArg::Explicit(d) => v.push(d),
                other => {
                    return Err(format!(
                        "{other} cannot be part of a device list; expected cpu, cuda:N or opencl:N \
                         separated by commas"
                    ));
                }
            }
        }
        return Ok(DeviceArg::Several(v));
    }
    let d: Device = t.parse().map_err(|e| {
        let why = match e {
            BridgeError::ParseDevice { reason, .. } => reason,
            other => other.to_string(),
        };
        format!("{t:?} is not a device ({why}); expected auto, cpu, cuda:N or opencl:N")
    })?;
    match d {
        Device::Cpu | Device::Cuda(_) | Device::OpenCl(_) => Ok(DeviceArg::Explicit(d)),
        other => Err(format!(
            "the commands run on cpu, cuda:N or opencl:N, not {other}; expected auto, cpu, \
             cuda:N or opencl:N"
        )),
    }
}

/// A stage of a command and the test of whether a device has a back end for it.
#[derive(Clone, Copy)]
pub struct Stage {
    /// Name in messages (`particle detection`, `PACO`).
    pub name: &'static str,
    /// `Ok` when the stage can run on the device.
    pub supports: fn(Device) -> Result<()>,
    /// The devices of one run must all compute in double or all in float (PACO).
    pub same_arithmetic: bool,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Particle detection (`detect`, the demo).
pub const DETECT: Stage = Stage {
    name: "particle detection",
    supports: |d| algorithms::detect::backend_for(&arraybridge::open_device(d)?).map(|_| ()),
    same_arithmetic: false,
};

/// PACO (`paco`, the demo).
pub const PACO: Stage = Stage {
    name: "PACO",
    supports: |d| algorithms::paco::backend_for(&arraybridge::open_device(d)?).map(|_| ()),
    same_arithmetic: true,
};

/// Resolve `--device` for one stage: an explicit device is checked ([`check_explicit`]); `auto`
/// runs the offload decision on the workload `estimate` gives (called only for `auto`).
pub fn resolve(
    arg: DeviceArg,
    stage: Stage,
    estimate: impl FnOnce() -> Result<(Workload, CpuProfile, String)>,
) -> Result<Choice> {
    match arg {
        DeviceArg::Explicit(d) => {
            check_explicit(d, &[stage])?;
            Ok(Choice::explicit(d))
        }
        DeviceArg::Auto => {
            let (work, cpu, note) = estimate()?;
            Ok(choose(stage, &work, &cpu, &note))
        }
        DeviceArg::Several(_) | DeviceArg::AllGpus => Err(several_error(&arg, stage.name)),
    }
}

/// Names of the devices the registry sees, `cpu` first.
fn available_devices() -> Vec<String> {
    std::iter::once("cpu".to_owned())
        .chain(
            arraybridge::registry()
                .device_infos()
                .map(|i| i.device.to_string()),
        )
        .collect()
}

/// An explicit device must exist and every stage must have a back end for it.
pub fn check_explicit(d: Device, stages: &[Stage]) -> Result<()> {
    if d == Device::Cpu {
        return Ok(());
    }
    let reg = arraybridge::registry();
    if !reg.device_infos().any(|i| i.device == d) {
        let mt = d.memory_type();
        let why = reg
            .reports()
            .iter()
            .find(|r| r.memory_type == mt)
            .and_then(|r| r.unavailable.clone())
            .map_or_else(String::new, |u| format!(" ({} backend: {u})", mt.name()));
        return Err(BridgeError::unavailable(
            mt.name(),
            format!(
                "device {d} was requested with --device but does not exist{why}; available: {}. \
                 Use --device auto to let the command choose",
                available_devices().join(", ")
            ),
        ));
    }
    for s in stages {
        (s.supports)(d).map_err(|e| {
            BridgeError::unavailable(
                d.memory_type().name(),
                format!(
                    "{} cannot run on {d}, which --device requested: {e}. Use --device auto \
                     to run each stage on the best device that supports it, or --device cpu",
                    s.name
                ),
            )
        })?;
    }
    Ok(())
}

/// The device of one stage and why.
#[derive(Debug, Clone)]
pub struct Choice {
    /// The device.
    pub device: Device,
    /// Why, in words (printed).
    pub reason: String,
    /// The offload estimate, with `--device auto`.
    pub estimate: Option<OffloadDecision>,
    /// True when `--device auto` chose it (a failure there may fall back to the CPU).
    pub auto: bool,
}

impl Choice {
    /// The choice of an explicit `--device d` (checked by [`check_explicit`]).
    pub fn explicit(d: Device) -> Self {
        Choice {
            device: d,
            reason: format!("requested with --device {d}"),
            estimate: None,
            auto: false,
        }
    }

    /// The line `COMMAND: device auto → DEVICE: REASON` for a choice `auto` made (printed by
    /// every command), `None` for an explicit device.
    pub fn auto_note(&self, command: &str) -> Option<String> {
        self.auto
            .then(|| format!("{command}: device auto → {}: {}", self.device, self.reason))
    }

    /// True when a failure on [`Choice::device`] may be retried on the CPU: `auto` chose a
    /// device other than the CPU.
    pub fn may_fall_back(&self) -> bool {
        self.auto && self.device != Device::Cpu
    }

    /// Run `f` on the chosen device; with `auto`, a failure there reruns it on the CPU, loudly.
    pub fn run<T>(&mut self, command: &str, mut f: impl FnMut(Device) -> Result<T>) -> Result<T> {
        match f(self.device) {
            Err(e) if self.may_fall_back() => {
                self.fell_back(command, &e);
                f(Device::Cpu)
            }
            r => r,
        }
    }

    /// With `--device auto`, a stage that fails on its device is rerun on the CPU — loudly: the
    /// failure is printed and becomes part of the reason.
    pub fn fell_back(&mut self, command: &str, e: &BridgeError) {
        let msg = one_line(&e.to_string(), 160);
        to_stderr(format_args!(
            "{command}: warning: failed on {}: {msg}; rerunning on the CPU",
            self.device
        ));
        self.reason = format!(
            "{} — but it failed there ({msg}), so it was rerun on the CPU",
            self.reason
        );
        self.device = Device::Cpu;
    }
}

/// Open every device of a list (the process's one handle of each).
pub fn open_all(devices: &[Device]) -> Result<Vec<arraybridge::DeviceHandle>> {
    devices
        .iter()
        .map(|&d| arraybridge::open_device(d))
        .collect()
}

pub use arraybridge::runtime::one_line;

/// `decide` over the devices of the registry that `supports` ([`arraybridge::runtime::choose`],
/// the policy the Python package shares); the reason also names the devices left out and why.
pub fn choose(stage: Stage, work: &Workload, cpu: &CpuProfile, cpu_note: &str) -> Choice {
    let c = arraybridge::runtime::choose(stage.name, &stage.supports, work, cpu, cpu_note);
    Choice {
        device: c.device,
        reason: c.reason,
        estimate: Some(c.decision),
        auto: true,
    }
}

pub use arraybridge::runtime::nominal_cpu;

/// Arithmetic of `blob_log` per pixel ([`arraybridge::runtime::blob_log_flops_per_pixel`]).
pub fn detect_flops_per_pixel(d: &LogDetector) -> f64 {
    arraybridge::runtime::blob_log_flops_per_pixel(
        d.params.min_sigma,
        d.params.max_sigma,
        d.params.num_sigma,
    )
}

/// The work of detecting `movie` with `d`.
pub fn detect_workload(movie: &Movie, d: &LogDetector) -> Workload {
    let (t, h, w) = movie.dim();
    let bytes_per_px = match movie {
        Movie::U8(_) => 1,
        Movie::U16(_) => 2,
        Movie::F32(_) => 4,
        Movie::F64(_) => 8,
    };
    arraybridge::runtime::detect_workload((t, h, w), bytes_per_px, detect_flops_per_pixel(d))
}

pub use arraybridge::runtime::paco_workload;

/// CPU throughput in the units of [`detect_flops_per_pixel`], measured on the first batch of
/// frames.
pub fn measure_cpu(movie: &Movie, d: &LogDetector) -> Result<(CpuProfile, usize)> {
    let n = movie.len().min(d.batch_size.max(2));
    let sample = match movie {
        Movie::U8(a) => Movie::U8(a.slice(s![..n, .., ..]).to_owned()),
        Movie::U16(a) => Movie::U16(a.slice(s![..n, .., ..]).to_owned()),
        Movie::F32(a) => Movie::F32(a.slice(s![..n, .., ..]).to_owned()),
        Movie::F64(a) => Movie::F64(a.slice(s![..n, .., ..]).to_owned()),
    };
    let plain = LogDetector {
        refine: None,
        ..d.clone()
    };
    let t = Instant::now();
    plain.detect_movie_with(&sample, &CpuBackend::default(), |_| {})?;
    let secs = t.elapsed().as_secs_f64().max(1e-6);
    Ok((
        CpuProfile {
            flops_per_s: detect_workload(&sample, d).flops / secs,
        },
        n,
    ))
}

/// The `auto` estimate of a detection: its workload and the CPU throughput measured on the
/// first frames.
pub fn detect_estimate(movie: &Movie, d: &LogDetector) -> Result<(Workload, CpuProfile, String)> {
    let (cpu, n) = measure_cpu(movie, d)?;
    Ok((
        detect_workload(movie, d),
        cpu,
        format!("measured on the first {n} frames"),
    ))
}

#[cfg(test)]
mod tests;
