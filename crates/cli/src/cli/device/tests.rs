#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use arraybridge::core::backend::DeviceInfo;
use arraybridge::runtime::{GpuDesc, all_gpus, nominal_profile};

fn gpu(device: Device, pci: Option<&str>, uuid: Option<&str>, fp64: bool) -> GpuDesc {
    GpuDesc {
        device,
        pci: pci.map(str::to_owned),
        uuid: uuid.map(str::to_owned),
        fp64,
    }
}

#[test]
fn all_lists_each_physical_gpu_once_preferring_cuda() {
    let (c0, c1, o0, o1, o2) = (
        Device::Cuda(0),
        Device::Cuda(1),
        Device::OpenCl(0),
        Device::OpenCl(1),
        Device::OpenCl(2),
    );
    // NVIDIA's OpenCL (listed first) gives bus and slot without the domain; CUDA all three
    let found = [
        gpu(o0, Some("?:41:00"), None, true),
        gpu(o1, Some("?:01:00"), None, true),
        gpu(c0, Some("0000:01:00"), Some("GPU-aa"), true),
        gpu(c1, Some("0000:41:00"), Some("GPU-bb"), true),
        // another vendor's GPU: no twin
        gpu(o2, Some("0000:c3:00"), None, true),
    ];
    let (kept, notes) = all_gpus(&found, true);
    assert_eq!(kept, vec![c0, c1, o2]);
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("opencl:0 is the GPU cuda:1"), "{notes:?}");
    // a UUID match (cl_khr_device_uuid) without PCI information
    let found = [
        gpu(c0, None, Some("GPU-aa"), true),
        gpu(o0, None, Some("gpu-AA"), true),
    ];
    assert_eq!(all_gpus(&found, false).0, vec![c0]);
    // nothing to match by: both kept; different domains: both kept
    let found = [gpu(c0, None, None, true), gpu(o0, None, None, true)];
    assert_eq!(all_gpus(&found, false).0, vec![c0, o0]);
    let found = [
        gpu(c0, Some("0000:01:00"), None, true),
        gpu(o0, Some("0001:01:00"), None, true),
    ];
    assert_eq!(all_gpus(&found, false).0, vec![c0, o0]);
    // unreadable PCI text (a failed attribute) matches nothing
    let found = [
        gpu(c0, Some("ffffffff:ffffffff:ffffffff"), None, true),
        gpu(o0, Some("garbage"), None, true),
    ];
    assert_eq!(all_gpus(&found, false).0, vec![c0, o0]);
    // two OpenCL platforms listing one GPU: the first is kept
    let found = [
        gpu(o0, Some("0000:01:00"), None, true),
        gpu(o1, Some("0000:01:00"), None, true),
    ];
    assert_eq!(all_gpus(&found, false).0, vec![o0]);
}

#[test]
fn all_leaves_out_gpus_without_double_where_the_arithmetic_is_shared() {
    let found = [
        gpu(Device::Cuda(0), Some("0000:01:00"), None, true),
        gpu(Device::OpenCl(0), Some("0000:02:00"), None, false),
        gpu(Device::OpenCl(1), Some("0000:03:00"), None, false),
    ];
    let (kept, notes) = all_gpus(&found, true);
    assert_eq!(kept, vec![Device::Cuda(0)]);
    assert!(
        notes[0].contains("left out opencl:0,opencl:1")
            && notes[0].contains("--device opencl:0,opencl:1"),
        "{notes:?}"
    );
    // detection does not need it; all without double: all kept
    assert_eq!(all_gpus(&found, false).0.len(), 3);
    let (kept, notes) = all_gpus(&found[1..], true);
    assert_eq!((kept.len(), notes.len()), (2, 0));
}

#[test]
fn device_requests() {
    assert_eq!(parse_device_arg(" AUTO ").unwrap(), DeviceArg::Auto);
    assert_eq!(
        parse_device_arg("opencl:1").unwrap(),
        DeviceArg::Explicit(Device::OpenCl(1))
    );
    let e = parse_device_arg("gpu").unwrap_err();
    assert!(e.contains("\"gpu\"") && e.contains("expected auto"), "{e}");
    assert!(parse_device_arg("torch:cpu").is_err());
    assert!(check_explicit(Device::Cpu, &[DETECT, PACO]).is_ok());
    let e = check_explicit(Device::Cuda(99), &[DETECT])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cuda:99") && e.contains("available: cpu"), "{e}");
    let c = resolve(DeviceArg::Explicit(Device::Cpu), PACO, || {
        unreachable!("no estimate for an explicit device")
    })
    .unwrap();
    assert!(!c.may_fall_back());
    assert_eq!(DeviceArg::Explicit(Device::Cuda(2)).to_string(), "cuda:2");
}

#[test]
fn fallback_is_recorded() {
    let mut c = Choice {
        device: Device::Cuda(0),
        reason: "faster".into(),
        estimate: None,
        auto: true,
    };
    let mut tried = Vec::new();
    let r = c.run("test", |d| {
        tried.push(d);
        if d == Device::Cpu {
            Ok(1)
        } else {
            Err(BridgeError::InvalidInput("boom".into()))
        }
    });
    assert_eq!(r.unwrap(), 1);
    assert_eq!(tried, [Device::Cuda(0), Device::Cpu]);
    assert_eq!(c.device, Device::Cpu);
    assert!(c.reason.starts_with("faster") && c.reason.contains("boom"));
    // An explicit device never falls back.
    let mut c = Choice {
        device: Device::Cuda(0),
        reason: String::new(),
        estimate: None,
        auto: false,
    };
    assert!(
        c.run("test", |_| Err::<(), _>(BridgeError::InvalidInput(
            "x".into()
        )))
        .is_err()
    );
}

#[test]
fn workloads_and_profiles() {
    let d = LogDetector::default();
    let per_px = detect_flops_per_pixel(&d);
    assert!(per_px > 100.0 && per_px < 10_000.0);
    let w = paco_workload(48, 80, 4);
    assert_eq!(w.input_bytes, 48 * 80 * 80 * 8);
    assert!(w.flops > 1e8);
    let cpu = CpuProfile { flops_per_s: 1e10 };
    let mut info = DeviceInfo::new(Device::OpenCl(0), "pocl");
    info.details.push(("type".into(), "cpu".into()));
    let (p, note) = nominal_profile(&info, &cpu);
    assert_eq!(p.flops_per_s, 1e10);
    assert!(note.contains("CPU device"));
    let (p, _) = nominal_profile(&DeviceInfo::new(Device::Cuda(0), "gpu"), &cpu);
    assert!(p.flops_per_s > cpu.flops_per_s);
}
