//! The policies every front end shares (the command line, the Python package, the MPI driver),
//! so that a device list or `all` means the same everywhere: which devices `all` runs on, and
//! the device lists of a run.

use bridge_core::backend::DeviceInfo;
use bridge_core::{BridgeError, Device, Result};

use crate::DeviceHandle;

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
/// a note per device left out: a GPU listed by both CUDA and OpenCL (matched by [`same_gpu`])
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
