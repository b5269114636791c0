//! Route planning and conversion execution over fake backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bridge_core::convert::{Registry, TransferKind};
use bridge_core::{Array, BridgeError, Device, MemoryType};
use ndarray::ArrayD;
use rand::Rng;
use support::{FakeBackend, FakeZeroCopy, Recorder, new_log};
use test_support::fake as support;

use MemoryType::{Cuda, Host, OpenCl, Torch};
use TransferKind::{HostCopy, PeerCopy, PinnedStaged, ZeroCopy};

fn full_registry() -> (Registry, support::Log) {
    let log = new_log();
    let mut reg = Registry::new();
    let cuda = FakeBackend::new(
        Cuda,
        &[
            (Device::Cuda(0), Some("GPU-A")),
            (Device::Cuda(1), Some("GPU-B")),
        ],
        1 << 20,
        log.clone(),
    )
    .with_peers(&[(Device::Cuda(0), Device::Cuda(1))]);
    reg.register_backend(cuda);
    reg.register_backend(FakeBackend::new(
        OpenCl,
        &[(Device::OpenCl(0), None)],
        1 << 20,
        log.clone(),
    ));
    reg.register_backend(FakeBackend::new(
        Torch,
        &[
            (Device::TorchCpu, None),
            (Device::TorchCuda(0), Some("GPU-A")),
        ],
        1 << 20,
        log.clone(),
    ));
    for (s, d) in [(Torch, Cuda), (Cuda, Torch), (Host, Torch), (Torch, Host)] {
        reg.register_converter(Arc::new(FakeZeroCopy { src: s, dst: d }));
    }
    (reg, log)
}

const ENDPOINTS: [Device; 6] = [
    Device::Cpu,
    Device::Cuda(0),
    Device::Cuda(1),
    Device::OpenCl(0),
    Device::TorchCpu,
    Device::TorchCuda(0),
];

fn expected(src: Device, dst: Device) -> Vec<TransferKind> {
    use Device::*;
    match (src, dst) {
        (a, b) if a == b => vec![],
        (Cpu, Cuda(_)) | (Cuda(_), Cpu) => vec![PinnedStaged],
        (Cpu, OpenCl(_)) | (OpenCl(_), Cpu) => vec![HostCopy],
        (Cpu, TorchCpu) | (TorchCpu, Cpu) => vec![ZeroCopy],
        (Cpu, TorchCuda(_)) | (TorchCuda(_), Cpu) => vec![PinnedStaged],
        (Cuda(0), Cuda(1)) => vec![PeerCopy],
        (Cuda(1), Cuda(0)) => vec![PinnedStaged, PinnedStaged],
        (Cuda(0), TorchCuda(0)) | (TorchCuda(0), Cuda(0)) => vec![ZeroCopy],
        (Cuda(1), TorchCuda(0)) => vec![PinnedStaged, PinnedStaged],
        // Zero-copy onto cuda:0, then the peer link.
        (TorchCuda(0), Cuda(1)) => vec![ZeroCopy, PeerCopy],
        (Cuda(_), OpenCl(_)) => vec![PinnedStaged, HostCopy],
        (OpenCl(_), Cuda(_)) => vec![HostCopy, PinnedStaged],
        (Cuda(_), TorchCpu) => vec![PinnedStaged, ZeroCopy],
        (TorchCpu, Cuda(_)) => vec![ZeroCopy, PinnedStaged],
        (OpenCl(_), TorchCpu) => vec![HostCopy, ZeroCopy],
        (TorchCpu, OpenCl(_)) => vec![ZeroCopy, HostCopy],
        (OpenCl(_), TorchCuda(_)) => vec![HostCopy, PinnedStaged],
        (TorchCuda(_), OpenCl(_)) => vec![PinnedStaged, HostCopy],
        (TorchCpu, TorchCuda(_)) => vec![ZeroCopy, PinnedStaged],
        (TorchCuda(_), TorchCpu) => vec![PinnedStaged, ZeroCopy],
        other => panic!("no expectation for {other:?}"),
    }
}

#[test]
fn every_pair_plans_the_cheapest_route() {
    let (reg, log) = full_registry();
    let before = log.lock().unwrap().len();
    for src in ENDPOINTS {
        for dst in ENDPOINTS {
            let route = reg
                .plan(src.memory_type(), src, dst.memory_type(), dst)
                .unwrap_or_else(|e| panic!("{src} -> {dst}: {e}"));
            let kinds: Vec<_> = route.steps.iter().map(|s| s.kind).collect();
            assert_eq!(kinds, expected(src, dst), "{src} -> {dst}: {route}");
            // Hops chain up from source to destination.
            let mut at = route.from;
            for s in &route.steps {
                assert_eq!(s.from, at);
                at = s.to;
            }
            assert_eq!(at.device, dst);
            // Pure: the same answer twice.
            assert_eq!(
                reg.plan(src.memory_type(), src, dst.memory_type(), dst)
                    .unwrap(),
                route
            );
        }
    }
    assert_eq!(
        log.lock().unwrap().len(),
        before,
        "planning must not touch any device"
    );
}

#[test]
fn every_pair_rejects_impossible_requests() {
    let (reg, _) = full_registry();
    for src_mt in MemoryType::ALL {
        for dst_mt in MemoryType::ALL {
            // A memory type on a device it cannot live on.
            for dev in ENDPOINTS {
                let ok_src = ENDPOINTS
                    .iter()
                    .copied()
                    .find(|d| d.memory_type() == src_mt)
                    .unwrap();
                let r = reg.plan(src_mt, ok_src, dst_mt, dev);
                if dev.memory_type() == dst_mt {
                    assert!(r.is_ok(), "{src_mt} -> {dst_mt}@{dev}: {r:?}");
                } else {
                    assert!(
                        matches!(r, Err(BridgeError::InvalidPlacement { .. })),
                        "{src_mt} -> {dst_mt}@{dev}: {r:?}"
                    );
                }
            }
        }
    }
    // An ndarray on cuda:0.
    let e = reg
        .plan(Host, Device::Cpu, Host, Device::Cuda(0))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("host memory cannot live on device cuda:0"),
        "{e}"
    );
    // Ordinals the backend does not have.
    for d in [Device::Cuda(7), Device::OpenCl(3), Device::TorchCuda(1)] {
        let e = reg.plan(Host, Device::Cpu, d.memory_type(), d).unwrap_err();
        assert!(
            matches!(e, BridgeError::UnknownDevice { device, .. } if device == d),
            "{e}"
        );
        let e2 = reg.plan(d.memory_type(), d, Host, Device::Cpu).unwrap_err();
        assert!(matches!(e2, BridgeError::UnknownDevice { .. }), "{e2}");
    }
}

#[test]
fn unavailable_backends_and_missing_converters_are_typed() {
    let mut reg = Registry::new();
    let e = reg
        .plan(Host, Device::Cpu, Cuda, Device::Cuda(0))
        .unwrap_err();
    assert!(matches!(e, BridgeError::BackendUnavailable { .. }), "{e}");
    reg.mark_unavailable("cuda", Cuda, "libcuda.so not found");
    let e = reg
        .plan(Host, Device::Cpu, Cuda, Device::Cuda(0))
        .unwrap_err();
    assert!(e.to_string().contains("libcuda.so not found"), "{e}");
    // A device known to the topology but no converter: NoRoute.
    reg.topology_mut().add_device(Device::OpenCl(0), None);
    let e = reg
        .plan(Host, Device::Cpu, OpenCl, Device::OpenCl(0))
        .unwrap_err();
    assert!(matches!(e, BridgeError::NoRoute { .. }), "{e}");
}

#[test]
fn backend_with_no_device_is_reported_unavailable() {
    let mut reg = Registry::new();
    reg.register_backend(FakeBackend::new(OpenCl, &[], 1024, new_log()));
    assert_eq!(
        reg.reports()[0].unavailable.as_deref(),
        Some("no device found")
    );
    let e = reg
        .plan(Host, Device::Cpu, OpenCl, Device::OpenCl(0))
        .unwrap_err();
    assert!(e.to_string().contains("no device found"), "{e}");
}

#[test]
fn convert_moves_data_exactly_and_records_routes() {
    let (reg, _) = full_registry();
    let rec = Arc::new(Recorder::default());
    reg.set_observer(Some(rec.clone()));
    let mut rng = rand::rng();
    let data = ArrayD::from_shape_fn(vec![7, 5, 3], |_| rng.random::<f32>());
    let nc = data.clone().permuted_axes(vec![2, 0, 1]); // non-contiguous view order
    let a = Array::from_ndarray(nc.clone());
    assert!(!a.is_contiguous());
    let on_gpu = reg.convert(a, Cuda, Device::Cuda(0)).unwrap();
    assert_eq!(on_gpu.device(), Device::Cuda(0));
    assert_eq!(on_gpu.shape(), &[3, 7, 5]);
    let on_cl = reg.convert(on_gpu, OpenCl, Device::OpenCl(0)).unwrap();
    let back = reg
        .convert(on_cl, Host, Device::Cpu)
        .unwrap()
        .into_ndarray::<f32>()
        .unwrap();
    assert_eq!(back, nc);
    let records = rec.records.lock().unwrap();
    assert_eq!(records.len(), 3);
    let n = (7 * 5 * 3 * 4) as u64;
    assert_eq!(records[0].bytes_moved, n);
    assert_eq!(records[1].route.steps.len(), 2);
    assert_eq!(records[1].bytes_moved, 2 * n);
    assert_eq!(records[2].route.kind(), HostCopy);
}

#[test]
fn in_place_conversion_moves_nothing() {
    let (reg, _) = full_registry();
    let rec = Arc::new(Recorder::default());
    reg.set_observer(Some(rec.clone()));
    let a = Array::from_ndarray(ArrayD::<u8>::from_elem(vec![3], 9));
    let b = reg.convert(a, Host, Device::Cpu).unwrap();
    assert_eq!(b.as_ndarray::<u8>().unwrap()[[1]], 9);
    let r = &rec.records.lock().unwrap()[0];
    assert_eq!((r.bytes_moved, r.route.kind()), (0, TransferKind::InPlace));
    assert!(r.route.is_zero_copy());
}

#[test]
fn conversions_from_many_threads() {
    let (reg, _) = full_registry();
    std::thread::scope(|s| {
        for t in 0..8u16 {
            let reg = &reg;
            s.spawn(move || {
                let data =
                    ArrayD::from_shape_fn(vec![64, 16], |ix| (ix[0] * 16 + ix[1]) as u16 ^ t);
                let d = reg
                    .convert(
                        Array::from_ndarray(data.clone()),
                        Cuda,
                        Device::Cuda((t % 2) as usize),
                    )
                    .unwrap();
                let back = reg
                    .convert(d, Host, Device::Cpu)
                    .unwrap()
                    .into_ndarray::<u16>()
                    .unwrap();
                assert_eq!(back, data);
            });
        }
    });
}

/// `Registry::copy` takes the planned route from a borrowed array, which stays where it was:
/// a peer hop between devices, a device copy on the array's own device, a host clone on the
/// host; a route whose first hop takes the memory over (zero-copy) is refused in words.
#[test]
fn copy_leaves_the_source_and_takes_the_planned_route() {
    let (reg, log) = full_registry();
    let rec = Arc::new(Recorder::default());
    reg.set_observer(Some(rec.clone()));
    let mut rng = rand::rng();
    let data = ArrayD::<f32>::from_shape_fn(vec![5, 7], |_| rng.random());
    let on0 = reg
        .convert(Array::from_ndarray(data.clone()), Cuda, Device::Cuda(0))
        .unwrap();
    log.lock().unwrap().clear();
    let on1 = reg.copy(&on0, Cuda, Device::Cuda(1)).unwrap();
    assert_eq!(on1.device(), Device::Cuda(1));
    assert_eq!(on0.device(), Device::Cuda(0), "the source stays");
    assert_eq!(log.lock().unwrap()[0], "copy cuda:0 -> cuda:1 peer-copy");
    let kinds = |r: &bridge_core::convert::ConversionRecord| -> Vec<TransferKind> {
        r.route.steps.iter().map(|s| s.kind).collect()
    };
    assert_eq!(
        kinds(rec.records.lock().unwrap().last().unwrap()),
        [PeerCopy]
    );
    let again = reg.copy(&on0, Cuda, Device::Cuda(0)).unwrap();
    assert_eq!(
        kinds(rec.records.lock().unwrap().last().unwrap()),
        [TransferKind::DeviceCopy]
    );
    for a in [on0, on1, again] {
        let back = reg.convert(a, Host, Device::Cpu).unwrap();
        assert_eq!(back.into_ndarray::<f32>().unwrap(), data);
    }
    let host = Array::from_ndarray(data.clone());
    let copied = reg.copy(&host, Host, Device::Cpu).unwrap();
    assert_ne!(
        copied.host().unwrap().to_c_bytes().as_ptr(),
        host.host().unwrap().to_c_bytes().as_ptr()
    );
    assert_eq!(copied.into_ndarray::<f32>().unwrap(), data);
    // the host to torch:cpu hop is zero-copy: a borrowed array cannot be handed over
    let e = reg.copy(&host, Torch, Device::TorchCpu).unwrap_err();
    assert!(matches!(e, BridgeError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("convert the array itself"), "{e}");
}
