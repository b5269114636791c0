//! The policies every front end shares (the command line, the Python package, the MPI driver),
//! so that a device list or `all` means the same everywhere: which devices `all` runs on, and
//! the device lists of a run, and what `auto` chooses; how a stream of chunks is read ahead
//! of the device ([`ReadAhead`]); and how a movie run piece by piece numbers its frames and
//! the errors of each piece in the movie's frames ([`pieces`], from `bridge_core::pieces`).

use std::fmt::Write as _;

use bridge_core::backend::DeviceInfo;
use bridge_core::offload::{
    CpuProfile, DeviceProfile, OffloadDecision, OffloadThresholds, Workload, decide,
};
use bridge_core::{BridgeError, Device, Result};

use crate::DeviceHandle;

pub use bridge_core::pieces::{Piece, Pieces, pieces};

/// What `--device all` needs to know of a GPU: its device, where it sits on the PCI bus
/// (`DOMAIN:BUS:DEVICE` in hex, the domain `?` when the API does not give it), its UUID, and
/// whether it computes in double precision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDesc {
    /// The device.
    pub device: Device,
    /// The `pci` detail of its backend (CUDA: device attributes; OpenCL: `cl_khr_pci_bus_info`
    /// or NVIDIA's `CL_DEVICE_PCI_BUS_ID_NV`/`SLOT_ID_NV`), when there is one.
    pub pci: Option<String>,
    /// Its UUID (CUDA, OpenCL `cl_khr_device_uuid`), when known.
    pub uuid: Option<String>,
    /// Double precision.
    pub fp64: bool,
}

impl GpuDesc {
    /// The description of a device the registry lists.
    pub fn of(i: &DeviceInfo) -> GpuDesc {
        GpuDesc {
            device: i.device,
            pci: i
                .details
                .iter()
                .find(|(k, _)| k == "pci")
                .map(|(_, v)| v.clone()),
            uuid: i.uuid.clone(),
            fp64: i.capabilities.fp64,
        }
    }
}

/// A PCI address `DOMAIN:BUS:DEVICE` (hex; the domain may be `?`, unknown).
fn parse_pci(s: &str) -> Option<(Option<u32>, u32, u32)> {
    let mut parts = s.trim().split(':');
    let (d, b, v) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let hex = |x: &str| u32::from_str_radix(x, 16).ok();
    let domain = if d == "?" { None } else { Some(hex(d)?) };
    Some((domain, hex(b)?, hex(v)?))
}

/// Whether two descriptions are one physical GPU: the same UUID, or the same PCI bus and
/// device (and domain, where both give it). Without either, they are kept apart.
fn same_gpu(a: &GpuDesc, b: &GpuDesc) -> bool {
    if let (Some(x), Some(y)) = (&a.uuid, &b.uuid)
        && x.eq_ignore_ascii_case(y)
    {
        return true;
    }
    match (
        a.pci.as_deref().and_then(parse_pci),
        b.pci.as_deref().and_then(parse_pci),
    ) {
        (Some((da, ba, va)), Some((db, bb, vb))) => {
            ba == bb && va == vb && (da.is_none() || db.is_none() || da == db)
        }
        _ => false,
    }
}

/// The devices `--device all` runs on, from every GPU the backends list (in their order), and
/// a note per device left out: a GPU listed by both CUDA and OpenCL (matched by `same_gpu`: the same UUID or PCI address)
/// is kept once, as its CUDA device (or the first listed); with `same_arithmetic` (PACO: the
/// devices of one run must all compute in double or all in float), the GPUs without double
/// precision are left out when others have it.
pub fn all_gpus(found: &[GpuDesc], same_arithmetic: bool) -> (Vec<Device>, Vec<String>) {
    let cuda = |d: &GpuDesc| matches!(d.device, Device::Cuda(_));
    let mut notes = Vec::new();
    let mut kept: Vec<&GpuDesc> = Vec::new();
    for (i, g) in found.iter().enumerate() {
        // another listing of this GPU that wins: a CUDA one, or an earlier one of the same API
        let twin = found.iter().enumerate().find(|&(j, o)| {
            j != i && same_gpu(g, o) && (cuda(o) && !cuda(g) || (cuda(o) == cuda(g) && j < i))
        });
        match twin {
            Some((_, o)) => notes.push(format!(
                "{} is the GPU {} already lists (same {}); it runs as {}",
                g.device,
                o.device,
                if g.uuid.is_some() && g.uuid == o.uuid {
                    "UUID"
                } else {
                    "PCI address"
                },
                o.device
            )),
            None => kept.push(g),
        }
    }
    if same_arithmetic && kept.iter().any(|g| g.fp64) && kept.iter().any(|g| !g.fp64) {
        let (with, without): (Vec<&GpuDesc>, Vec<&GpuDesc>) = kept.iter().partition(|g| g.fp64);
        let list = |v: &[&GpuDesc]| {
            v.iter()
                .map(|g| g.device.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        notes.push(format!(
            "left out {} (no double precision): the devices of one run must share the \
             arithmetic, so it runs on those with double precision ({}); to run in float on the \
             others, name them: --device {}",
            list(&without),
            list(&with),
            list(&without)
        ));
        kept = with;
    }
    (kept.into_iter().map(|g| g.device).collect(), notes)
}

/// The GPUs `all` runs on for a stage (`supports`: whether the stage has a back end on a
/// device): every CUDA device and every OpenCL device that is not a CPU, of the process
/// registry, through [`all_gpus`]; with its notes on the devices left out.
pub fn gpus(
    supports: &dyn Fn(Device) -> Result<()>,
    same_arithmetic: bool,
) -> (Vec<Device>, Vec<String>) {
    let found: Vec<GpuDesc> = crate::registry()
        .device_infos()
        .filter(|i| match i.device {
            Device::Cuda(_) => true,
            Device::OpenCl(_) => !i.is_cpu_device(),
            Device::Cpu | Device::TorchCpu | Device::TorchCuda(_) => false,
        })
        .filter(|i| supports(i.device).is_ok())
        .map(GpuDesc::of)
        .collect();
    all_gpus(&found, same_arithmetic)
}

/// A device list as the front ends spell it, open: `"opencl:0,opencl:1"` (each device once,
/// each must exist and run the stage) or `"all"` (every GPU, [`gpus`]; an error when there is
/// none). `None` for one device or `auto` (the caller's single-device path).
pub fn device_list(
    spec: &str,
    stage: &str,
    supports: &dyn Fn(Device) -> Result<()>,
    same_arithmetic: bool,
) -> Result<Option<Vec<DeviceHandle>>> {
    let spec = spec.trim();
    let devices: Vec<Device> = if spec.eq_ignore_ascii_case("all") {
        let (gpus, notes) = gpus(supports, same_arithmetic);
        for n in &notes {
            log::info!("device all: {n}");
        }
        if gpus.is_empty() {
            return Err(BridgeError::unavailable(
                "gpu",
                format!(
                    "device \"all\" found no GPU for {stage}; name the devices (\"opencl:0,opencl:1\") or use \"auto\""
                ),
            ));
        }
        gpus
    } else if spec.contains(',') {
        let mut v = Vec::new();
        for part in spec.split(',') {
            let d: Device = part.trim().parse()?;
            if v.contains(&d) {
                return Err(BridgeError::invalid_argument(
                    "device",
                    format!("{d} is named twice in {spec:?}"),
                ));
            }
            supports(d).map_err(|e| {
                BridgeError::unavailable(
                    d.memory_type().name(),
                    format!("{stage} cannot run on {d} of {spec:?}: {e}"),
                )
            })?;
            v.push(d);
        }
        v
    } else {
        return Ok(None);
    };
    devices
        .into_iter()
        .map(crate::open_device)
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The `auto` choice of a stage: the device, why in words (the decision's reason, how the
/// throughputs were obtained, and the devices left out and why), and the decision itself.
#[derive(Debug, Clone)]
pub struct AutoChoice {
    /// The device.
    pub device: Device,
    /// Why, in words.
    pub reason: String,
    /// The offload decision (every device's estimate).
    pub decision: OffloadDecision,
}

/// `auto` for one stage (`stage`: its name in messages; `supports`: whether it has a back end
/// on a device): [`decide`] over the devices of the process registry that the stage runs on,
/// from the workload and the CPU's throughput (`cpu_note` says how it was obtained), with
/// [`nominal_profile`] figures for the devices. The command line and the Python package both
/// call this, so `auto` chooses the same device in both.
pub fn choose(
    stage: &str,
    supports: &dyn Fn(Device) -> Result<()>,
    work: &Workload,
    cpu: &CpuProfile,
    cpu_note: &str,
) -> AutoChoice {
    let reg = crate::registry();
    let mut skipped = Vec::new();
    let mut profiles = Vec::new();
    let mut notes = Vec::new();
    for info in reg.device_infos() {
        match supports(info.device) {
            Ok(()) => {
                let (p, note) = nominal_profile(info, cpu);
                profiles.push(p);
                notes.push(note);
            }
            Err(e) => skipped.push(format!(
                "{}: {}",
                info.device,
                crate::runtime::one_line(&e.to_string(), 90)
            )),
        }
    }
    let d = decide(work, cpu, &profiles, &OffloadThresholds::default());
    let reason = if profiles.is_empty() {
        let est = format!("est. {:.3} s on the CPU", d.cpu_s);
        if skipped.is_empty() {
            let missing: Vec<String> = reg
                .reports()
                .iter()
                .filter_map(|r| {
                    r.unavailable
                        .as_ref()
                        .map(|u| format!("{}: {}", r.name, crate::runtime::one_line(u, 70)))
                })
                .collect();
            format!(
                "no GPU device is available ({}); running on the CPU, {est}",
                missing.join("; ")
            )
        } else {
            format!(
                "no device has a {stage} back end ({}); running on the CPU, {est}",
                skipped.join("; ")
            )
        }
    } else {
        let mut r = format!(
            "{} [CPU throughput: {cpu_note}; {}]",
            d.reason,
            notes.join("; ")
        );
        if !skipped.is_empty() {
            let _ = write!(r, " (without a {stage} back end: {})", skipped.join("; "));
        }
        r
    };
    AutoChoice {
        device: d.device,
        reason,
        decision: d,
    }
}

/// Nominal figures of a device (peak arithmetic × 10 % for stencil-bound work, typical link
/// bandwidth); an OpenCL CPU device (PoCL) shares the host cores, so it gets the measured CPU
/// throughput. Also returns how the figures were obtained.
pub fn nominal_profile(info: &DeviceInfo, cpu: &CpuProfile) -> (DeviceProfile, String) {
    let cu = f64::from(info.capabilities.compute_units.unwrap_or(8));
    let kind = info
        .details
        .iter()
        .find(|(k, _)| k == "type")
        .map(|(_, v)| v.to_ascii_lowercase());
    let d = info.device;
    let (flops, bw, note) = match d {
        Device::Cuda(_) => (
            cu * 128.0 * 2.0 * 1.4e9 * 0.1,
            1.2e10,
            format!("{d}: nominal figures for {cu} SMs"),
        ),
        Device::OpenCl(_) if kind.as_deref() == Some("cpu") => (
            cpu.flops_per_s,
            1.0e10,
            format!("{d} is an OpenCL CPU device sharing the host cores"),
        ),
        _ => (
            cu * 64.0 * 2.0 * 1.0e9 * 0.1,
            8.0e9,
            format!("{d}: nominal figures for {cu} compute units"),
        ),
    };
    (
        DeviceProfile {
            device: d,
            h2d_bytes_per_s: bw,
            d2h_bytes_per_s: bw,
            flops_per_s: flops,
            free_memory: info.free_memory.or(info.total_memory),
            launch_overhead_s: 5e-3,
        },
        note,
    )
}

/// Nominal CPU throughput (for stages whose CPU speed is not measured first): 2·10⁹ work units
/// per second per hardware thread.
pub fn nominal_cpu() -> (CpuProfile, String) {
    // `available_parallelism` reads the cgroup's CPU quota from /proc and /sys on every call:
    // once per process is enough for a nominal figure
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let n = *THREADS
        .get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    (
        CpuProfile {
            flops_per_s: 2e9 * n as f64,
        },
        format!("nominal figures for {n} CPU threads"),
    )
}

/// Shorten a (possibly multi-line) reason to one line of at most `n` characters.
pub fn one_line(s: &str, n: usize) -> String {
    let line = s.lines().next().unwrap_or_default().trim();
    if line.chars().count() > n {
        format!("{}…", line.chars().take(n).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// Arithmetic of `blob_log` per pixel: for each σ, four separable passes of `2⌈4σ⌉+1` taps (two
/// flops each) plus the 3×3×3 maximum test.
pub fn blob_log_flops_per_pixel(min_sigma: f64, max_sigma: f64, num_sigma: usize) -> f64 {
    let n = num_sigma.max(1);
    (0..n)
        .map(|i| {
            let sigma = if n == 1 {
                min_sigma
            } else {
                min_sigma + (max_sigma - min_sigma) * i as f64 / (n - 1) as f64
            };
            let taps = 2.0 * (4.0 * sigma).ceil() + 1.0;
            4.0 * taps * 2.0 + 30.0
        })
        .sum()
}

/// The work of detecting a movie of `(t, h, w)` pixels of `bytes_per_px` bytes, at
/// `flops_per_pixel` ([`blob_log_flops_per_pixel`]).
pub fn detect_workload(
    (t, h, w): (usize, usize, usize),
    bytes_per_px: usize,
    flops_per_pixel: f64,
) -> Workload {
    Workload {
        input_bytes: (t * h * w * bytes_per_px) as u64,
        output_bytes: (t * 200 * 48) as u64,
        flops: (t * h * w) as f64 * flops_per_pixel,
    }
}

/// PACO (fast mode): lag tables, one K×K Cholesky and solve per pixel, and the trajectory sums.
/// A radius beyond the frame's side `n` (which the run itself refuses) is estimated at `n`, so
/// that the estimate, made before the inputs are checked, stays cheap whatever it is asked.
pub fn paco_workload(t: usize, n: usize, radius: usize) -> Workload {
    let radius = radius.min(n);
    let k = algorithms::paco::disk_area(radius) as f64;
    let lags = algorithms::paco::disk_area(2 * radius) as f64;
    let px = (n * n) as f64;
    let t = t as f64;
    Workload {
        input_bytes: (t * px * 8.0) as u64,
        output_bytes: (5.0 * px * 8.0) as u64,
        flops: t * px * lags * 2.0
            + px * (k * k * k / 3.0 + 4.0 * k * k + 2.0 * t * k)
            + 4.0 * t * px,
    }
}

/// An iterator run ahead on a reader thread, holding at most `depth` finished items (and the
/// one being read): the next chunk of a movie is decoded while this one is detected, and
/// memory stays bounded by `depth + 1` chunks plus the one in use. Items come out in order;
/// an error is an item like any other (the reader stops after handing it over, as a
/// [`MovieStream`](crate::io::stream::MovieStream) does). Dropping it early (a failed chunk, a
/// cancelled run) stops the reader after the item it is reading and waits for it, so no thread
/// outlives the stream.
///
/// ```
/// use arraybridge::runtime::ReadAhead;
///
/// let chunks = (0..5).map(|i| if i < 4 { Ok(i) } else { Err("chunk 4 is damaged") });
/// let got: Vec<_> = ReadAhead::new(chunks, 1)?.collect();
/// assert_eq!(got, [Ok(0), Ok(1), Ok(2), Ok(3), Err("chunk 4 is damaged")]);
/// # Ok::<(), arraybridge::BridgeError>(())
/// ```
pub struct ReadAhead<T: Send + 'static> {
    rx: Option<std::sync::mpsc::Receiver<T>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl<T: Send + 'static> ReadAhead<T> {
    /// Start reading `items` on a thread of its own, `depth` items ahead (at least 1).
    /// [`BridgeError::Io`] when the system refuses the thread.
    pub fn new<I>(items: I, depth: usize) -> Result<Self>
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel::<T>(depth.max(1));
        let items = items.into_iter();
        let reader = std::thread::Builder::new()
            .name("arraybridge-read-ahead".into())
            .spawn(move || {
                for item in items {
                    if tx.send(item).is_err() {
                        break; // the consumer is gone
                    }
                }
            })
            .map_err(|e| BridgeError::io("starting the read-ahead thread", e))?;
        Ok(ReadAhead {
            rx: Some(rx),
            reader: Some(reader),
        })
    }
}

impl<T: Send + 'static> Iterator for ReadAhead<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.rx.as_ref()?.recv().ok()
    }
}

impl<T: Send + 'static> Drop for ReadAhead<T> {
    fn drop(&mut self) {
        drop(self.rx.take()); // the reader's next send fails: it stops
        if let Some(r) = self.reader.take() {
            let _ = r.join(); // a reader that panicked has nothing left to hand over
        }
    }
}

impl<T: Send + 'static> std::fmt::Debug for ReadAhead<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAhead").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod read_ahead_tests {
    use super::ReadAhead;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Dropped after one item, the reader stops within `depth + 1` items of it and is gone.
    #[test]
    fn an_early_drop_stops_the_reader() {
        let read = Arc::new(AtomicUsize::new(0));
        let r2 = Arc::clone(&read);
        let items = (0..1000).inspect(move |_| {
            r2.fetch_add(1, Ordering::SeqCst);
        });
        let mut ra = ReadAhead::new(items, 2).unwrap();
        assert_eq!(ra.next(), Some(0));
        drop(ra);
        let n = read.load(Ordering::SeqCst);
        assert!(n <= 1 + 2 + 2, "{n} items read for one used");
    }

    #[test]
    fn every_item_in_order() {
        let got: Vec<u32> = ReadAhead::new(0..500u32, 1).unwrap().collect();
        assert_eq!(got, (0..500).collect::<Vec<_>>());
    }
}
