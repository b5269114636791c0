#![allow(clippy::unwrap_used, clippy::expect_used)]
//! OpenCL ↔ OpenCL between two devices of one platform (one shared context: a device-side
//! peer copy). PoCL exposes two devices with `POCL_DEVICES="pthread pthread"`, so the test
//! re-runs itself in a child process with that setting.

mod common;

use std::process::Command;

use bridge_core::backend::Backend;
use bridge_core::convert::TransferKind;
use bridge_core::{Array, DType, Device, MemoryType};
use rand::{Rng, SeedableRng, rngs::StdRng};

const CHILD: &str = "ARRAYBRIDGE_OPENCL_MULTI_DEVICE_CHILD";

#[test]
fn two_devices_on_one_platform() {
    if !test_support::rerun::in_child(CHILD) {
        let Some((backend, dev)) = common::device() else {
            return;
        };
        let pocl = backend
            .device_info(dev)
            .unwrap()
            .details
            .iter()
            .any(|(k, v)| k == "platform" && v.contains("Portable Computing Language"));
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "two_devices_on_one_platform",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("POCL_DEVICES", "pthread pthread")
            .output()
            .unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "child failed:\n{text}");
        if pocl {
            assert!(
                text.contains("peer route"),
                "the child did not see two PoCL devices:\n{text}"
            );
        }
        for l in text
            .lines()
            .filter(|l| l.contains("note:") || l.contains("peer route"))
        {
            eprintln!("child: {l}");
        }
        return;
    }
    let Some((backend, _)) = common::device() else {
        return;
    };
    if backend.device_count() < 2 {
        eprintln!("note: only one OpenCL device (not PoCL?); multi-device test skipped");
        return;
    }
    let (d0, d1) = (Device::OpenCl(0), Device::OpenCl(1));
    assert!(backend.can_access_peer(d0, d1));
    let reg = common::registry(&backend);
    let route = reg
        .plan(MemoryType::OpenCl, d0, MemoryType::OpenCl, d1)
        .unwrap();
    assert_eq!(route.steps.len(), 1);
    assert_eq!(route.kind(), TransferKind::PeerCopy);
    println!("peer route: {route}");

    let mut rng = StdRng::seed_from_u64(9);
    let mut bytes = vec![0u8; 4 * 1000 * 37];
    rng.fill(&mut bytes[..]);
    let host = bridge_core::HostData::from_c_bytes(DType::F32, &[1000, 37], &bytes).unwrap();
    let on0 = reg
        .convert(Array::from_host(host), MemoryType::OpenCl, d0)
        .unwrap();
    let on1 = reg.convert(on0, MemoryType::OpenCl, d1).unwrap();
    assert_eq!(on1.device(), d1);
    let back_to_0 = reg.convert(on1, MemoryType::OpenCl, d0).unwrap();
    let back = reg
        .convert(back_to_0, MemoryType::Host, Device::Cpu)
        .unwrap();
    assert_eq!(back.host().unwrap().to_c_bytes().as_ref(), &bytes[..]);

    // Both devices have their own pool and statistics.
    assert!(backend.pool_stats(d0).unwrap().device_allocs > 0);
    assert!(backend.pool_stats(d1).unwrap().device_allocs > 0);
}
