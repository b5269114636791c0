#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Torch-CUDA ↔ bridge-cuda exchange cost (feature `cuda-interop`, needs a GPU), 1 KiB …
//! 256 MiB (f32): `torch:cuda:0 → cuda:0 → torch:cuda:0` through the registry, both hops
//! zero-copy (pointer exchange plus the hand-over synchronisations), so the time must not depend
//! on the size. Without a GPU it prints a note and measures nothing.
//!
//! Run: `cargo bench -p bridge-torch --features cuda-interop --bench torch_cuda_exchange`.

use std::hint::black_box;
use std::time::Duration;

use bridge_core::convert::Registry;
use bridge_core::{Array, Device, MemoryType};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [(usize, &str); 4] = [
    (1 << 10, "1KiB"),
    (1 << 20, "1MiB"),
    (64 << 20, "64MiB"),
    (256 << 20, "256MiB"),
];

fn bench(c: &mut Criterion) {
    if bridge_torch::cuda_device_count() == 0 || !bridge_cuda::probe::gpu_available() {
        eprintln!(
            "torch_cuda_exchange: no GPU for both torch and bridge-cuda ({}); nothing measured",
            bridge_torch::cuda_unavailable_reason().unwrap_or_default()
        );
        return;
    }
    let mut reg = Registry::new();
    reg.register_backend(bridge_torch::backend());
    reg.register_backend(bridge_cuda::backend());
    let mut g = c.benchmark_group("torch_cuda_zero_copy_round_trip");
    g.sample_size(20);
    for (bytes, name) in SIZES {
        let t = bridge_torch::tch::Tensor::zeros(
            [(bytes / 4) as i64],
            (
                bridge_torch::tch::Kind::Float,
                bridge_torch::tch::Device::Cuda(0),
            ),
        );
        let mut slot: Option<Array> = Some(bridge_torch::array_from_tensor(t).unwrap());
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let a = slot.take().unwrap();
                let c = reg.convert(a, MemoryType::Cuda, Device::Cuda(0)).unwrap();
                let t = reg
                    .convert(black_box(c), MemoryType::Torch, Device::TorchCuda(0))
                    .unwrap();
                slot = Some(t);
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
