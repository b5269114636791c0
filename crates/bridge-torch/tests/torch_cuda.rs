#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Torch-CUDA paths. Each test skips (passes with a note) when libtorch has no CUDA device, and
//! fails instead under `ARRAYBRIDGE_REQUIRE_GPU=1`.

use bridge_core::backend::Backend;
use bridge_core::convert::{Registry, TransferKind};
use bridge_core::memory::MemoryInfo;
use bridge_core::oom::{RetryPolicy, with_oom_retry};
use bridge_core::{Array, BridgeError, DType, Device, MemoryType};
use ndarray::{ArrayD, IxDyn};
use test_support::require::{GPU as REQUIRE_GPU, skip};

/// The GPU tests read allocator figures: run them one at a time.
static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `Some((registry, lock))` when torch:cuda:0 exists; otherwise skip, or panic under
/// ARRAYBRIDGE_REQUIRE_GPU=1.
fn gpu_or_skip() -> Option<(Registry, std::sync::MutexGuard<'static, ()>)> {
    if bridge_torch::cuda_device_count() == 0 {
        let why = bridge_torch::cuda_unavailable_reason().unwrap_or_default();
        skip(Some(REQUIRE_GPU), "torch:cuda:0", why);
        return None;
    }
    let lock = GPU.lock().unwrap_or_else(|p| p.into_inner());
    let mut reg = Registry::new();
    reg.register_backend(bridge_torch::backend());
    Some((reg, lock))
}

#[test]
fn host_cuda_round_trip_every_dtype() {
    let Some((reg, _lock)) = gpu_or_skip() else {
        return;
    };
    let route = reg
        .plan(
            MemoryType::Host,
            Device::Cpu,
            MemoryType::Torch,
            Device::TorchCuda(0),
        )
        .unwrap();
    assert_eq!(route.kind(), TransferKind::PinnedStaged);
    for dtype in DType::ALL {
        let data = bridge_core::HostData::from_c_bytes(
            dtype,
            &[17, 33],
            &(0..17 * 33 * dtype.size_of())
                .map(|i| (i * 7 % 251) as u8)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        // Keep values finite for floats: bytes are arbitrary but compared bit-exactly.
        let a = Array::from_host(data.clone());
        let g = reg
            .convert(a, MemoryType::Torch, Device::TorchCuda(0))
            .unwrap();
        assert_eq!(g.device(), Device::TorchCuda(0));
        let back = reg.convert(g, MemoryType::Host, Device::Cpu).unwrap();
        assert_eq!(
            back.host().unwrap().to_c_bytes(),
            data.to_c_bytes(),
            "{dtype}"
        );
    }
}

#[test]
fn device_moves_through_the_planner() {
    let Some((reg, _lock)) = gpu_or_skip() else {
        return;
    };
    let a = ArrayD::from_shape_fn(IxDyn(&[64, 3]), |ix| (ix[0] * 3 + ix[1]) as f32);
    let t = reg
        .convert(
            Array::from_ndarray(a.clone()),
            MemoryType::Torch,
            Device::TorchCpu,
        )
        .unwrap();
    let g = reg
        .convert(t, MemoryType::Torch, Device::TorchCuda(0))
        .unwrap();
    assert_eq!(g.device(), Device::TorchCuda(0));
    let c = reg.convert(g, MemoryType::Torch, Device::TorchCpu).unwrap();
    assert_eq!(c.device(), Device::TorchCpu);
    let back = reg.convert(c, MemoryType::Host, Device::Cpu).unwrap();
    assert_eq!(back.into_ndarray::<f32>().unwrap(), a);
}

#[test]
fn cuda_device_has_uuid_and_memory_stats() {
    let Some((reg, _lock)) = gpu_or_skip() else {
        return;
    };
    let info = reg
        .device_infos()
        .find(|d| d.device == Device::TorchCuda(0))
        .unwrap();
    assert!(info.uuid.as_deref().is_some_and(|u| u.starts_with("GPU-")));
    let b = bridge_torch::backend();
    let before = b.memory_stats(Device::TorchCuda(0)).unwrap();
    assert!(before.total > 0);
    let a = Array::from_ndarray(ArrayD::<f32>::zeros(IxDyn(&[1 << 20])));
    let g = reg
        .convert(a, MemoryType::Torch, Device::TorchCuda(0))
        .unwrap();
    let during = b.memory_stats(Device::TorchCuda(0)).unwrap();
    assert!(during.pool_in_use >= before.pool_in_use + (4 << 20));
    assert!(during.pool_reserved >= during.pool_in_use);
    drop(g);
    let released = b.release_pool(Device::TorchCuda(0));
    let after = b.memory_stats(Device::TorchCuda(0)).unwrap();
    assert!(released > 0 || after.pool_reserved == 0);
    assert!(after.pool_reserved <= during.pool_reserved);
}

#[test]
fn real_cuda_oom_is_out_of_memory_and_retried() {
    let Some((reg, _lock)) = gpu_or_skip() else {
        return;
    };
    // 2^50 bytes cannot be allocated on any GPU.
    let huge = 1usize << 48;
    let mut attempts = 0;
    let r = with_oom_retry(&RetryPolicy::default(), Device::TorchCuda(0), &reg, || {
        attempts += 1;
        bridge_torch::tch::Tensor::f_empty(
            [huge as i64],
            (
                bridge_torch::tch::Kind::Float,
                bridge_torch::tch::Device::Cuda(0),
            ),
        )
        .map_err(|e| bridge_torch::map_tch_error(Device::TorchCuda(0), (huge * 4) as u64, &e))
    });
    assert!(matches!(r, Err(BridgeError::OutOfMemory { .. })), "{r:?}");
    assert_eq!(attempts, 3);
}

/// Torch memory exported and re-imported through the foreign-memory hooks: the two tensors
/// share one allocation, and the importer keeps the exporter alive.
struct Exported(bridge_torch::cuda::CudaExport);

// SAFETY: a CudaExport holds the tensor whose allocation it describes (alive while it lives),
// and export_cuda synchronised the device.
unsafe impl bridge_torch::cuda::ForeignCudaMemory for Exported {
    fn device_ptr(&self) -> u64 {
        self.0.device_ptr()
    }
    fn nbytes(&self) -> usize {
        self.0.nbytes()
    }
    fn cuda_ordinal(&self) -> usize {
        self.0.cuda_ordinal()
    }
    fn synchronize(&self) -> bridge_core::Result<()> {
        Ok(())
    }
}

#[test]
fn foreign_cuda_memory_is_aliased_not_copied() {
    use bridge_torch::tch::{Device as TDevice, Kind, Tensor};
    let Some((_reg, _lock)) = gpu_or_skip() else {
        return;
    };
    let t = Tensor::arange(1000, (Kind::Float, TDevice::Cuda(0)));
    let (export, copied) = bridge_torch::cuda::export_cuda(&t).unwrap();
    assert!(!copied);
    let ptr = export.device_ptr();
    drop(t);
    let mut alias =
        bridge_torch::cuda::tensor_from_foreign_cuda(Exported(export), &[10, 100], DType::F32)
            .unwrap();
    assert_eq!(alias.data_ptr() as usize as u64, ptr);
    let _ = alias.fill_(2.0);
    let host = bridge_torch::array_from_tensor(alias.shallow_clone()).unwrap();
    let mut reg = Registry::new();
    reg.register_backend(bridge_torch::backend());
    let back = reg.convert(host, MemoryType::Host, Device::Cpu).unwrap();
    assert!(
        back.into_ndarray::<f32>()
            .unwrap()
            .iter()
            .all(|&v| v == 2.0)
    );
}
