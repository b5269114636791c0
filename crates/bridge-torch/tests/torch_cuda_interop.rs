#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Torch-CUDA ↔ bridge-cuda zero-copy exchange on a real GPU. Skips (passes with a note) without
//! a CUDA device seen by both libtorch and the CUDA driver; FAILS under
//! `ARRAYBRIDGE_REQUIRE_GPU=1`.

use std::sync::Arc;

use bridge_core::convert::{Converter, Registry, TransferKind};
use bridge_core::{Array, DType, Device, HostData, MemoryType};
use bridge_cuda::{Gpu, storage_of};
use bridge_torch::cuda_interop::{CudaToTorch, TorchToCuda};
use bridge_torch::tch::{self, Tensor};
use rand::{Rng, SeedableRng, rngs::StdRng};
use test_support::require::{GPU as REQUIRE_GPU, skip};

static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Env {
    reg: Registry,
    gpu: Arc<Gpu>,
    _lock: std::sync::MutexGuard<'static, ()>,
}

fn gpu_or_skip() -> Option<Env> {
    let why = if bridge_torch::cuda_device_count() == 0 {
        Some(bridge_torch::cuda_unavailable_reason().unwrap_or_else(|| "no torch:cuda:0".into()))
    } else if !bridge_cuda::probe::gpu_available() {
        Some("bridge-cuda sees no CUDA device".into())
    } else {
        None
    };
    if let Some(why) = why {
        skip(Some(REQUIRE_GPU), "a GPU for torch ↔ bridge-cuda", why);
        return None;
    }
    let lock = GPU.lock().unwrap_or_else(|p| p.into_inner());
    let mut reg = Registry::new();
    reg.register_backend(bridge_torch::backend());
    reg.register_backend(bridge_cuda::backend());
    Some(Env {
        reg,
        gpu: bridge_cuda::gpu(0).unwrap(),
        _lock: lock,
    })
}

fn random(dtype: DType, shape: &[usize], seed: u64) -> HostData {
    let n = shape.iter().product::<usize>() * dtype.size_of();
    let mut bytes = vec![0u8; n];
    StdRng::seed_from_u64(seed).fill(&mut bytes[..]);
    HostData::from_c_bytes(dtype, shape, &bytes).unwrap()
}

fn ptr_of(t: &Tensor) -> u64 {
    t.data_ptr() as usize as u64
}

/// The tensor's bytes, read back through the registry (a copy).
fn torch_bytes(env: &Env, t: &Tensor) -> Vec<u8> {
    tch::Cuda::synchronize(0);
    let a = bridge_torch::array_from_tensor(t.shallow_clone()).unwrap();
    let h = env.reg.convert(a, MemoryType::Host, Device::Cpu).unwrap();
    h.host().unwrap().to_c_bytes().into_owned()
}

fn cuda_bytes(env: &Env, a: &Array) -> Vec<u8> {
    env.gpu.download(a).unwrap().to_c_bytes().into_owned()
}

/// Reuse freed memory on both sides with other contents (a use-after-free would show up as a
/// changed value on the side that is still alive).
fn churn(env: &Env, nbytes: usize) {
    let mut keep = Vec::new();
    for k in 0..4 {
        let t = Tensor::full(
            [nbytes as i64],
            (k + 1) as i64,
            (tch::Kind::Uint8, tch::Device::Cuda(0)),
        );
        let c = env.gpu.alloc(DType::U8, &[nbytes]).unwrap();
        storage_of(&c).unwrap().fill_bytes(0xA0 + k as u8).unwrap();
        keep.push((t, c));
    }
    tch::Cuda::synchronize(0);
}

#[test]
fn registry_plans_one_zero_copy_hop() {
    let Some(env) = gpu_or_skip() else { return };
    for (a, b) in [
        (
            (MemoryType::Torch, Device::TorchCuda(0)),
            (MemoryType::Cuda, Device::Cuda(0)),
        ),
        (
            (MemoryType::Cuda, Device::Cuda(0)),
            (MemoryType::Torch, Device::TorchCuda(0)),
        ),
    ] {
        let r = env.reg.plan(a.0, a.1, b.0, b.1).unwrap();
        assert_eq!(r.steps.len(), 1, "{r}");
        assert_eq!(r.kind(), TransferKind::ZeroCopy, "{r}");
    }
}

#[test]
fn torch_cuda_torch_round_trip_shares_memory() {
    let Some(env) = gpu_or_skip() else { return };
    let data = random(DType::F32, &[257, 33], 1);
    let t = env
        .reg
        .convert(
            Array::from_host(data.clone()),
            MemoryType::Torch,
            Device::TorchCuda(0),
        )
        .unwrap();
    let mut t0 = bridge_torch::tensor_of(&t).unwrap();
    let ptr = ptr_of(&t0);

    // torch:cuda:0 → cuda:0: same pointer, nothing moved.
    let c = TorchToCuda
        .convert(t, Device::Cuda(0), TransferKind::ZeroCopy)
        .unwrap();
    assert_eq!(c.bytes_moved, 0);
    let c = c.array;
    assert_eq!(
        (c.memory_type(), c.device()),
        (MemoryType::Cuda, Device::Cuda(0))
    );
    assert_eq!((c.dtype(), c.shape()), (DType::F32, &[257usize, 33][..]));
    assert!(storage_of(&c).unwrap().is_foreign());
    assert_eq!(storage_of(&c).unwrap().device_ptr(), ptr);
    assert_eq!(cuda_bytes(&env, &c), data.to_c_bytes().as_ref());

    // A write through torch is seen by bridge-cuda (once torch's stream is done).
    let _ = t0.fill_(1.5);
    tch::Cuda::synchronize(0);
    let ones: Vec<u8> = std::iter::repeat_n(1.5f32.to_ne_bytes(), 257 * 33)
        .flatten()
        .collect();
    assert_eq!(cuda_bytes(&env, &c), ones);
    // A write through bridge-cuda (blocking) is seen by torch.
    storage_of(&c).unwrap().fill_bytes(0).unwrap();
    assert!(torch_bytes(&env, &t0).iter().all(|&b| b == 0));

    // cuda:0 → torch:cuda:0: the original memory again.
    let back = CudaToTorch
        .convert(c, Device::TorchCuda(0), TransferKind::ZeroCopy)
        .unwrap();
    assert_eq!(back.bytes_moved, 0);
    let back = back.array;
    assert_eq!(back.device(), Device::TorchCuda(0));
    let tb = bridge_torch::tensor_of(&back).unwrap();
    assert_eq!(ptr_of(&tb), ptr);
    assert_eq!(tb.size(), vec![257, 33]);

    // Through the registry too, and the data survives both hops.
    let c = env
        .reg
        .convert(back, MemoryType::Cuda, Device::Cuda(0))
        .unwrap();
    assert_eq!(storage_of(&c).unwrap().device_ptr(), ptr);
    let back = env
        .reg
        .convert(c, MemoryType::Torch, Device::TorchCuda(0))
        .unwrap();
    assert_eq!(ptr_of(&bridge_torch::tensor_of(&back).unwrap()), ptr);
    assert!(torch_bytes(&env, &tb).iter().all(|&b| b == 0));
}

#[test]
fn cuda_torch_cuda_round_trip_every_dtype() {
    let Some(env) = gpu_or_skip() else { return };
    for (k, dtype) in DType::ALL.into_iter().enumerate() {
        let data = random(dtype, &[31, 7], 10 + k as u64);
        let c = env.gpu.upload(&data).unwrap();
        let ptr = storage_of(&c).unwrap().device_ptr();
        let t = CudaToTorch
            .convert(c, Device::TorchCuda(0), TransferKind::ZeroCopy)
            .unwrap();
        assert_eq!(t.bytes_moved, 0);
        let tensor = bridge_torch::tensor_of(&t.array).unwrap();
        assert_eq!(ptr_of(&tensor), ptr, "{dtype}");
        assert_eq!(bridge_torch::dtype_of(&tensor).unwrap(), dtype);
        assert_eq!(
            torch_bytes(&env, &tensor),
            data.to_c_bytes().as_ref(),
            "{dtype}"
        );
        let c = TorchToCuda
            .convert(t.array, Device::Cuda(0), TransferKind::ZeroCopy)
            .unwrap();
        assert_eq!(c.bytes_moved, 0);
        assert_eq!(storage_of(&c.array).unwrap().device_ptr(), ptr);
        assert_eq!(
            cuda_bytes(&env, &c.array),
            data.to_c_bytes().as_ref(),
            "{dtype}"
        );
    }
    // Empty arrays go through too.
    let c = env.gpu.alloc(DType::F32, &[0, 4]).unwrap();
    let t = CudaToTorch
        .convert(c, Device::TorchCuda(0), TransferKind::ZeroCopy)
        .unwrap();
    assert_eq!(
        bridge_torch::tensor_of(&t.array).unwrap().size(),
        vec![0, 4]
    );
}

#[test]
fn either_side_may_be_dropped_first() {
    let Some(env) = gpu_or_skip() else { return };
    let n = 1 << 20;
    let data = random(DType::U8, &[n], 3);
    let expect = data.to_c_bytes().into_owned();

    // Torch-owned memory, viewed by bridge-cuda.
    for torch_first in [true, false] {
        let t = env
            .reg
            .convert(
                Array::from_host(data.clone()),
                MemoryType::Torch,
                Device::TorchCuda(0),
            )
            .unwrap();
        let keep = bridge_torch::tensor_of(&t).unwrap();
        let c = TorchToCuda
            .convert(t, Device::Cuda(0), TransferKind::ZeroCopy)
            .unwrap()
            .array;
        if torch_first {
            drop(keep);
            churn(&env, n);
            assert_eq!(cuda_bytes(&env, &c), expect);
            drop(c);
        } else {
            drop(c);
            churn(&env, n);
            assert_eq!(torch_bytes(&env, &keep), expect);
            drop(keep);
        }
        churn(&env, n);
    }

    // bridge-cuda-owned memory, viewed by torch (and seen again by bridge-cuda through torch).
    for torch_first in [true, false] {
        let c = env.gpu.upload(&data).unwrap();
        let ptr = storage_of(&c).unwrap().device_ptr();
        let t = CudaToTorch
            .convert(c, Device::TorchCuda(0), TransferKind::ZeroCopy)
            .unwrap()
            .array;
        let keep = bridge_torch::tensor_of(&t).unwrap();
        let c = TorchToCuda
            .convert(t, Device::Cuda(0), TransferKind::ZeroCopy)
            .unwrap()
            .array;
        assert_eq!(storage_of(&c).unwrap().device_ptr(), ptr);
        if torch_first {
            drop(keep);
            churn(&env, n);
            assert_eq!(cuda_bytes(&env, &c), expect);
            drop(c);
        } else {
            drop(c);
            churn(&env, n);
            assert_eq!(torch_bytes(&env, &keep), expect);
            drop(keep);
        }
        churn(&env, n);
    }
}
