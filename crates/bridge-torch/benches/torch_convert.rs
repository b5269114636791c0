#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! Host ↔ torch:cpu conversion cost, 1 KiB … 256 MiB (f32):
//! - `zero_copy_round_trip`: host → torch:cpu → host through the registry, both hops zero-copy
//!   (the same buffer comes back), so the time must not depend on the size;
//! - `zero_copy_round_trip_direct`: the same two hops called directly (no route planning);
//! - `copy_host_to_torch`: a negative-stride array, which must be copied into C order;
//! - `copy_torch_to_host`: a tensor torch allocated, copied into a new ndarray.
//!
//! Run: `cargo bench -p bridge-torch --bench torch_convert`
//! (quick: `-- --warm-up-time 0.5 --measurement-time 1`).

use std::hint::black_box;
use std::time::Duration;

use bridge_core::convert::Registry;
use bridge_core::{Array, Device, MemoryType};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ndarray::{ArrayD, Axis, IxDyn};

const SIZES: [(usize, &str); 6] = [
    (1 << 10, "1KiB"),
    (64 << 10, "64KiB"),
    (1 << 20, "1MiB"),
    (16 << 20, "16MiB"),
    (64 << 20, "64MiB"),
    (256 << 20, "256MiB"),
];

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register_backend(bridge_torch::backend());
    reg
}

fn bench(c: &mut Criterion) {
    let reg = registry();

    let mut g = c.benchmark_group("zero_copy_round_trip");
    g.sample_size(20);
    for (bytes, name) in SIZES {
        let mut slot = Some(Array::from_ndarray(ArrayD::<f32>::zeros(IxDyn(&[
            bytes / 4
        ]))));
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let a = slot.take().unwrap();
                let t = reg.convert(a, MemoryType::Torch, Device::TorchCpu).unwrap();
                let h = reg
                    .convert(black_box(t), MemoryType::Host, Device::Cpu)
                    .unwrap();
                slot = Some(h);
            })
        });
    }
    g.finish();

    // The same two hops without the registry (no route planning): the converters' own cost.
    let mut g = c.benchmark_group("zero_copy_round_trip_direct");
    g.sample_size(20);
    for (bytes, name) in SIZES {
        let mut slot = Some(bridge_core::HostData::F32(ArrayD::<f32>::zeros(IxDyn(&[
            bytes / 4,
        ]))));
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let d = slot.take().unwrap();
                let (s, _) = bridge_torch::convert::host_to_torch_cpu(d).unwrap();
                let (d, _) = bridge_torch::convert::torch_to_host(black_box(s)).unwrap();
                slot = Some(d);
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("copy_host_to_torch");
    g.sample_size(10);
    for (bytes, name) in SIZES {
        let mut a = ArrayD::<f32>::zeros(IxDyn(&[2, bytes / 8]));
        a.invert_axis(Axis(1)); // negative stride: must be copied
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_batched(
                || Array::from_ndarray(a.clone()),
                |arr| {
                    reg.convert(arr, MemoryType::Torch, Device::TorchCpu)
                        .unwrap()
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();

    let mut g = c.benchmark_group("copy_torch_to_host");
    g.sample_size(10);
    for (bytes, name) in SIZES {
        let t = bridge_torch::tch::Tensor::zeros(
            [(bytes / 4) as i64],
            (
                bridge_torch::tch::Kind::Float,
                bridge_torch::tch::Device::Cpu,
            ),
        );
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_batched(
                || bridge_torch::array_from_tensor(t.shallow_clone()).unwrap(),
                |arr| reg.convert(arr, MemoryType::Host, Device::Cpu).unwrap(),
                BatchSize::LargeInput,
            )
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
