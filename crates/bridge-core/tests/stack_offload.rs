//! Slice stacking and the offload decision.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bridge_core::convert::Registry;
use bridge_core::offload::{CpuProfile, DeviceProfile, OffloadThresholds, Workload, decide};
use bridge_core::stack::{stack, stack_to, unstack};
use bridge_core::{Array, BridgeError, DType, Device, MemoryType};
use ndarray::{Array2, ArrayD};
use rand::Rng;
use support::{FakeBackend, Recorder, new_log};
use test_support::fake as support;

fn frames(n: usize, r: usize, c: usize) -> Vec<Array2<f32>> {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| Array2::from_shape_fn((r, c), |_| rng.random()))
        .collect()
}

#[test]
fn stack_unstack_round_trip() {
    let f = frames(5, 6, 7);
    let arrs: Vec<Array> = f
        .iter()
        .map(|a| Array::from_ndarray(a.clone().into_dyn()))
        .collect();
    let cube = stack(&arrs).unwrap();
    assert_eq!(
        (cube.shape(), cube.dtype()),
        (&[5usize, 6, 7][..], DType::F32)
    );
    let back = unstack(&cube).unwrap();
    for (a, b) in f.iter().zip(&back) {
        assert_eq!(b.as_ndarray::<f32>().unwrap(), a.view().into_dyn());
    }
    // Non-contiguous slices stack correctly too.
    let t: Vec<Array> = f
        .iter()
        .map(|a| Array::from_ndarray(a.t().to_owned().into_dyn()))
        .collect();
    assert_eq!(stack(&t).unwrap().shape(), &[5, 7, 6]);
}

#[test]
fn stack_validates() {
    assert!(matches!(stack(&[]), Err(BridgeError::InvalidInput(_))));
    let a = Array::from_ndarray(ArrayD::<f32>::zeros(vec![2, 2]));
    let b = Array::from_ndarray(ArrayD::<f32>::zeros(vec![2, 3]));
    let c = Array::from_ndarray(ArrayD::<u16>::zeros(vec![2, 2]));
    let d = Array::from_ndarray(ArrayD::<f32>::zeros(vec![2, 2, 1]));
    assert!(matches!(
        stack(&[a, b]),
        Err(BridgeError::ShapeMismatch { .. })
    ));
    let a = Array::from_ndarray(ArrayD::<f32>::zeros(vec![2, 2]));
    assert!(matches!(
        stack(&[a, c]),
        Err(BridgeError::DTypeMismatch { .. })
    ));
    let a = Array::from_ndarray(ArrayD::<f32>::zeros(vec![2, 2]));
    assert!(matches!(
        stack(&[a, d]),
        Err(BridgeError::ShapeMismatch { .. })
    ));
    assert!(unstack(&Array::from_ndarray(ArrayD::<f32>::zeros(vec![2, 2]))).is_err());
}

#[test]
fn stack_to_device_is_one_conversion() {
    let log = new_log();
    let mut reg = Registry::new();
    reg.register_backend(FakeBackend::new(
        MemoryType::Cuda,
        &[(Device::Cuda(0), None)],
        1 << 20,
        log.clone(),
    ));
    let rec = Arc::new(Recorder::default());
    reg.set_observer(Some(rec.clone()));
    let f = frames(8, 16, 16);
    let arrs: Vec<Array> = f
        .iter()
        .map(|a| Array::from_ndarray(a.clone().into_dyn()))
        .collect();
    let dev = stack_to(&reg, &arrs, MemoryType::Cuda, Device::Cuda(0)).unwrap();
    assert_eq!(
        (dev.device(), dev.shape()),
        (Device::Cuda(0), &[8usize, 16, 16][..])
    );
    assert_eq!(rec.records.lock().unwrap().len(), 1);
    assert_eq!(
        log.lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("upload"))
            .count(),
        1
    );
    // A bad destination is rejected before any stacking or upload.
    assert!(stack_to(&reg, &arrs, MemoryType::Cuda, Device::Cuda(3)).is_err());
    assert_eq!(
        log.lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("upload"))
            .count(),
        1
    );
}

fn gpu(free: Option<u64>) -> DeviceProfile {
    DeviceProfile {
        device: Device::Cuda(0),
        h2d_bytes_per_s: 2e10,
        d2h_bytes_per_s: 2e10,
        flops_per_s: 1e13,
        free_memory: free,
        launch_overhead_s: 1e-5,
    }
}

#[test]
fn offload_decisions_explain_themselves() {
    let cpu = CpuProfile { flops_per_s: 1e10 };
    let t = OffloadThresholds::default();
    let big = Workload {
        input_bytes: 1 << 28,
        output_bytes: 1 << 20,
        flops: 1e12,
    };
    let d = decide(&big, &cpu, &[gpu(Some(1 << 34))], &t);
    assert_eq!(d.device, Device::Cuda(0));
    assert!(
        d.reason.contains("faster") && d.reason.contains("cuda:0"),
        "{d}"
    );
    // Transfer-bound: moving 256 MB for a trivial amount of work stays on the CPU.
    let light = Workload { flops: 1e7, ..big };
    let d = decide(&light, &cpu, &[gpu(None)], &t);
    assert_eq!(d.device, Device::Cpu);
    assert!(d.reason.contains("below"), "{d}");
    // Does not fit.
    let d = decide(&big, &cpu, &[gpu(Some(1 << 20))], &t);
    assert_eq!(d.device, Device::Cpu);
    assert!(d.reason.contains("free"), "{d}");
    // No device.
    let d = decide(&big, &cpu, &[], &t);
    assert!(
        d.device == Device::Cpu && d.reason.contains("no device"),
        "{d}"
    );
    // Floor.
    let d = decide(
        &big,
        &cpu,
        &[gpu(None)],
        &OffloadThresholds {
            min_input_bytes: 1 << 30,
            ..t
        },
    );
    assert!(d.device == Device::Cpu && d.reason.contains("floor"), "{d}");
    assert!(!d.to_string().is_empty());
}
