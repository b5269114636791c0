#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Torch-CUDA ↔ bridge-cuda planning, without a GPU: the zero-copy edges exist exactly between
//! `torch:cuda:N` and `cuda:M` of one physical GPU (equal UUIDs); other pairs go through the
//! host (or a CUDA copy).

use std::sync::Arc;

use bridge_core::backend::Backend;
use bridge_core::convert::{Converter, Topology, TransferKind, plan_route};
use bridge_core::{Device, MemoryType};
use bridge_torch::cuda_interop::{CudaToTorch, TorchToCuda, interop_edge};

const UUID_A: &str = "GPU-0000000a-aaaa-bbbb-cccc-000000000000";
const UUID_B: &str = "GPU-0000000b-aaaa-bbbb-cccc-000000000000";

/// Two GPUs, each seen by torch and by bridge-cuda: torch:cuda:0 = cuda:0, torch:cuda:1 = cuda:1.
fn topology() -> Topology {
    let mut t = Topology::host_only();
    t.add_device(Device::TorchCpu, None);
    for (i, u) in [UUID_A, UUID_B].into_iter().enumerate() {
        t.add_device(Device::Cuda(i), Some(u.into()));
        t.add_device(Device::TorchCuda(i), Some(u.into()));
    }
    t
}

fn converters() -> Vec<Arc<dyn Converter>> {
    let mut c = bridge_torch::backend().converters();
    c.extend(bridge_cuda::convert::converters());
    c
}

fn kinds(t: &Topology, a: (MemoryType, Device), b: (MemoryType, Device)) -> Vec<TransferKind> {
    plan_route(t, &converters(), a.0, a.1, b.0, b.1)
        .unwrap()
        .steps
        .iter()
        .map(|s| s.kind)
        .collect()
}

fn torch(i: usize) -> (MemoryType, Device) {
    (MemoryType::Torch, Device::TorchCuda(i))
}

fn cuda(i: usize) -> (MemoryType, Device) {
    (MemoryType::Cuda, Device::Cuda(i))
}

#[test]
fn backend_registers_the_interop_converters() {
    let c = bridge_torch::backend().converters();
    let pairs: Vec<_> = c.iter().map(|c| (c.source(), c.target())).collect();
    assert!(pairs.contains(&(MemoryType::Torch, MemoryType::Cuda)));
    assert!(pairs.contains(&(MemoryType::Cuda, MemoryType::Torch)));
}

#[test]
fn same_gpu_is_one_zero_copy_hop_both_ways() {
    let t = topology();
    for i in 0..2 {
        assert_eq!(kinds(&t, torch(i), cuda(i)), [TransferKind::ZeroCopy]);
        assert_eq!(kinds(&t, cuda(i), torch(i)), [TransferKind::ZeroCopy]);
        let r = plan_route(
            &t,
            &converters(),
            torch(i).0,
            torch(i).1,
            cuda(i).0,
            cuda(i).1,
        )
        .unwrap();
        assert!(r.is_zero_copy());
    }
}

#[test]
fn different_gpus_are_not_zero_copy() {
    let t = topology();
    // No direct edge between different GPUs.
    let (tc, cc) = (TorchToCuda, CudaToTorch);
    assert_eq!(tc.edge(Device::TorchCuda(0), Device::Cuda(1), &t), None);
    assert_eq!(cc.edge(Device::Cuda(1), Device::TorchCuda(0), &t), None);
    let r = plan_route(
        &t,
        &converters(),
        MemoryType::Torch,
        Device::TorchCuda(0),
        MemoryType::Cuda,
        Device::Cuda(1),
    )
    .unwrap();
    assert!(!r.is_zero_copy());
    assert!(r.steps.iter().any(|s| s.kind != TransferKind::ZeroCopy));
    assert_eq!(r.steps.last().unwrap().to.device, Device::Cuda(1));

    // torch:cuda:0 and cuda:0 on different hardware (different UUIDs): through the host.
    let mut t = Topology::host_only();
    t.add_device(Device::TorchCuda(0), Some(UUID_A.into()));
    t.add_device(Device::Cuda(0), Some(UUID_B.into()));
    assert_eq!(tc.edge(Device::TorchCuda(0), Device::Cuda(0), &t), None);
    assert_eq!(
        kinds(&t, torch(0), cuda(0)),
        [TransferKind::PinnedStaged, TransferKind::PinnedStaged]
    );
    assert_eq!(
        kinds(&t, cuda(0), torch(0)),
        [TransferKind::PinnedStaged, TransferKind::PinnedStaged]
    );

    // Unknown UUIDs are never assumed equal.
    let mut t = Topology::host_only();
    t.add_device(Device::TorchCuda(0), None);
    t.add_device(Device::Cuda(0), None);
    assert_eq!(
        interop_edge(Device::TorchCuda(0), Device::Cuda(0), &t),
        None
    );
}

#[test]
fn edges_only_between_torch_cuda_and_cuda() {
    let t = topology();
    let (tc, cc) = (TorchToCuda, CudaToTorch);
    assert_eq!(
        tc.edge(Device::TorchCuda(0), Device::Cuda(0), &t),
        Some(TransferKind::ZeroCopy)
    );
    assert_eq!(
        cc.edge(Device::Cuda(0), Device::TorchCuda(0), &t),
        Some(TransferKind::ZeroCopy)
    );
    // Wrong direction for the converter, or non-CUDA ends.
    assert_eq!(tc.edge(Device::Cuda(0), Device::TorchCuda(0), &t), None);
    assert_eq!(cc.edge(Device::TorchCuda(0), Device::Cuda(0), &t), None);
    assert_eq!(tc.edge(Device::TorchCpu, Device::Cuda(0), &t), None);
    assert_eq!(tc.edge(Device::TorchCuda(0), Device::Cpu, &t), None);
    assert_eq!(cc.edge(Device::Cuda(0), Device::TorchCpu, &t), None);
    assert_eq!(cc.edge(Device::Cpu, Device::TorchCuda(0), &t), None);
    // torch:cpu → cuda:0 is not zero-copy: the tensor is handed to the host as an ndarray
    // (zero-copy), then uploaded.
    assert_eq!(
        kinds(&t, (MemoryType::Torch, Device::TorchCpu), cuda(0)),
        [TransferKind::ZeroCopy, TransferKind::PinnedStaged]
    );
    assert_eq!(
        (tc.source(), tc.target()),
        (MemoryType::Torch, MemoryType::Cuda)
    );
    assert_eq!(
        (cc.source(), cc.target()),
        (MemoryType::Cuda, MemoryType::Torch)
    );
}

#[test]
fn convert_rejects_wrong_destinations_without_touching_a_device() {
    let a = bridge_core::Array::from_ndarray(ndarray::ArrayD::<f32>::zeros(vec![2]));
    assert!(matches!(
        TorchToCuda.convert(a, Device::Cpu, TransferKind::ZeroCopy),
        Err(bridge_core::BridgeError::InvalidPlacement { .. })
    ));
    let a = bridge_core::Array::from_ndarray(ndarray::ArrayD::<f32>::zeros(vec![2]));
    assert!(matches!(
        CudaToTorch.convert(a, Device::TorchCpu, TransferKind::ZeroCopy),
        Err(bridge_core::BridgeError::InvalidPlacement { .. })
    ));
    // A host array is not a bridge-cuda array.
    let a = bridge_core::Array::from_ndarray(ndarray::ArrayD::<f32>::zeros(vec![2]));
    assert!(matches!(
        CudaToTorch.convert(a, Device::TorchCuda(0), TransferKind::ZeroCopy),
        Err(bridge_core::BridgeError::Unsupported(_))
    ));
}
