//! Platform and device enumeration.
//!
//! Discovery only *queries* the driver (`clGetPlatformIDs`, `clGetDeviceIDs`, `clGet*Info`): it
//! creates no context, queue or buffer. Platforms are sorted by (name, vendor, version) so that
//! `opencl:N` ordinals do not depend on the ICD loader's directory order; devices keep the
//! driver's order within their platform.

use std::sync::OnceLock;

use bridge_core::backend::{Capabilities, DeviceInfo};
use bridge_core::{BridgeError, DType, Device};
use opencl3::device::{
    CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU, Device as ClDevice,
};
use opencl3::platform::{Platform, get_platforms};

use crate::error::{BACKEND, discovery_reason};

/// One device, as discovered.
#[derive(Debug, Clone)]
pub(crate) struct DeviceEntry {
    /// `opencl:N`.
    pub device: Device,
    /// The driver's handle.
    pub id: ClDevice,
    /// Index into [`Discovery::platforms`].
    pub platform: usize,
    /// What `devices()` reports.
    pub info: DeviceInfo,
    /// `CL_DEVICE_GLOBAL_MEM_SIZE`.
    pub global_mem: u64,
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE`.
    pub max_alloc: u64,
    /// `cl_khr_fp16`.
    pub fp16: bool,
    /// `cl_khr_fp64` or a non-zero double config.
    pub fp64: bool,
    /// 64-bit integers (always in the full profile; `cles_khr_int64` in the embedded one).
    pub int64: bool,
    /// `CL_DEVICE_MEM_BASE_ADDR_ALIGN` in bytes (sub-buffer origins must be multiples of it).
    pub base_align: usize,
}

impl DeviceEntry {
    /// Whether arrays of `dtype` may live on this device; a typed error otherwise.
    pub(crate) fn check_dtype(&self, dtype: DType) -> Result<(), BridgeError> {
        let missing = match dtype {
            DType::F16 if !self.fp16 => Some("the device does not report cl_khr_fp16"),
            DType::F64 if !self.fp64 => Some("the device does not report cl_khr_fp64"),
            DType::I64 if !self.int64 => {
                Some("the embedded-profile device does not report cles_khr_int64")
            }
            _ => None,
        };
        match missing {
            Some(reason) => Err(BridgeError::UnsupportedDType {
                dtype,
                device: self.device,
                reason: reason.to_owned(),
            }),
            None => Ok(()),
        }
    }
}

/// The result of one enumeration.
#[derive(Debug, Clone)]
pub(crate) struct Discovery {
    /// Devices by ordinal.
    pub devices: Vec<DeviceEntry>,
    /// For each platform (sorted), the ordinals of its devices.
    pub platforms: Vec<Vec<usize>>,
}

fn platform_key(p: &Platform) -> (String, String, String) {
    (
        p.name().unwrap_or_default(),
        p.vendor().unwrap_or_default(),
        p.version().unwrap_or_default(),
    )
}

fn hex_uuid(u: &[u8]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The process-wide enumeration, done once on first use.
///
/// Process-wide because (a) ordinals must agree between backend instances and (b) some
/// drivers (PoCL 3.1 through ocl-icd, observed) crash when two threads enumerate at once.
pub(crate) fn discovery() -> &'static Result<Discovery, String> {
    static DISCOVERY: OnceLock<Result<Discovery, String>> = OnceLock::new();
    DISCOVERY.get_or_init(discover)
}

/// Enumerate every device of every platform. Errors carry the reason the backend is unusable.
fn discover() -> Result<Discovery, String> {
    let mut platforms = get_platforms().map_err(|e| discovery_reason("clGetPlatformIDs", e.0))?;
    platforms.sort_by_cached_key(platform_key);
    let mut devices = Vec::new();
    let mut by_platform = Vec::new();
    for (pi, p) in platforms.iter().enumerate() {
        let key = platform_key(p);
        // A platform with no device answers CL_DEVICE_NOT_FOUND: skip it.
        let ids = p.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default();
        let mut ordinals = Vec::new();
        for id in ids {
            let d = ClDevice::new(id);
            if !d.available().unwrap_or(false) {
                continue;
            }
            let ordinal = devices.len();
            devices.push(device_entry(d, ordinal, (pi, &key)));
            ordinals.push(ordinal);
        }
        by_platform.push(ordinals);
    }
    if devices.is_empty() {
        return Err(format!(
            "no available OpenCL device on {} platform(s)",
            platforms.len()
        ));
    }
    Ok(Discovery {
        devices,
        platforms: by_platform,
    })
}

/// Whether the space-separated extension list `ext` names `e`.
fn has_extension(ext: &str, e: &str) -> bool {
    ext.split_whitespace().any(|x| x == e)
}

/// The entry of available device `d`, `opencl:ordinal`, of platform `pi` (sorted) whose
/// (name, vendor, version) is `key`: what it supports and what `devices()` reports.
fn device_entry(
    d: ClDevice,
    ordinal: usize,
    (pi, (pname, pvendor, pversion)): (usize, &(String, String, String)),
) -> DeviceEntry {
    let device = Device::OpenCl(ordinal);
    let ext = d.extensions().unwrap_or_default();
    let has = |e: &str| has_extension(&ext, e);
    let fp16 = has("cl_khr_fp16");
    let fp64 = has("cl_khr_fp64") || d.double_fp_config().map(|c| c != 0).unwrap_or(false);
    let profile = d.profile().unwrap_or_default();
    let int64 = profile != "EMBEDDED_PROFILE" || has("cles_khr_int64");
    let global_mem = d.global_mem_size().unwrap_or(0);
    let max_alloc = d.max_mem_alloc_size().unwrap_or(0);
    let base_align = (d.mem_base_addr_align().unwrap_or(1024) / 8).max(1) as usize;
    let kind = match d.dev_type().unwrap_or(0) {
        t if t & CL_DEVICE_TYPE_GPU != 0 => "gpu",
        t if t & CL_DEVICE_TYPE_CPU != 0 => "cpu",
        _ => "accelerator",
    };
    let uuid = device_uuid(&d, &ext, kind);
    let name = d
        .name()
        .unwrap_or_else(|_| "unknown OpenCL device".to_owned());
    let mut info = DeviceInfo {
        uuid,
        total_memory: Some(global_mem),
        free_memory: None,
        capabilities: Capabilities {
            fp16,
            // bf16 is plain 16-bit storage (no OpenCL C type, no extension needed).
            bf16: true,
            fp64,
            compute_units: d.max_compute_units().ok(),
            max_alloc: Some(max_alloc),
            compute_capability: None,
        },
        details: vec![
            ("platform".to_owned(), pname.clone()),
            ("platform vendor".to_owned(), pvendor.clone()),
            ("platform version".to_owned(), pversion.clone()),
            ("type".to_owned(), kind.to_owned()),
            ("vendor".to_owned(), d.vendor().unwrap_or_default()),
            ("version".to_owned(), d.version().unwrap_or_default()),
            ("driver".to_owned(), d.driver_version().unwrap_or_default()),
            (
                "opencl c".to_owned(),
                d.opencl_c_version().unwrap_or_default(),
            ),
            ("profile".to_owned(), profile),
        ],
        ..DeviceInfo::new(device, name)
    };
    if let Some(pci) = pci_location(&d, &ext) {
        info.details.push(("pci".to_owned(), pci));
    }
    DeviceEntry {
        device,
        id: d,
        platform: pi,
        info,
        global_mem,
        max_alloc,
        fp16,
        fp64,
        int64,
        base_align,
    }
}

/// The UUID of device `d` (extensions `ext`, of `kind` gpu, cpu or accelerator) when it
/// reports one (`cl_khr_device_uuid`).
fn device_uuid(d: &ClDevice, ext: &str, kind: &str) -> Option<String> {
    // Formatted like bridge-cuda (`nvidia-smi` style) for GPUs, so that an NVIDIA GPU seen
    // through OpenCL and through CUDA compares equal in the registry's topology.
    if has_extension(ext, "cl_khr_device_uuid") {
        d.uuid_khr().ok().map(|u| {
            let hex = hex_uuid(&u);
            if kind == "gpu" {
                format!("GPU-{hex}")
            } else {
                hex
            }
        })
    } else {
        None
    }
}

/// Where device `d` (extensions `ext`) sits on the PCI bus, when it says.
fn pci_location(d: &ClDevice, ext: &str) -> Option<String> {
    // Where the device sits on the PCI bus, formatted like bridge-cuda's `pci` detail
    // (DOMAIN:BUS:DEVICE in hex; NVIDIA's query has no domain: `?`), so `--device all`
    // can list a GPU seen through both APIs once.
    if has_extension(ext, "cl_khr_pci_bus_info") {
        d.pcibusinfokhr_intel().ok().map(|p| {
            format!(
                "{:04x}:{:02x}:{:02x}",
                p.pci_domain, p.pci_bus, p.pci_device
            )
        })
    } else if has_extension(ext, "cl_nv_device_attribute_query") {
        match (d.pci_bus_id_nv(), d.pci_slot_id_nv()) {
            // the slot id holds device << 3 | function
            (Ok(bus), Ok(slot)) => Some(format!("?:{bus:02x}:{:02x}", slot >> 3)),
            _ => None,
        }
    } else {
        None
    }
}

/// The unavailability error for a failed discovery.
pub(crate) fn unavailable(reason: &str) -> BridgeError {
    BridgeError::unavailable(BACKEND, reason)
}
