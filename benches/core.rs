//! Core costs that sit on every conversion: planning a route and casting on the host.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

use bridge_core::dtype::{CastMode, cast_slice};
use bridge_core::{Device, MemoryType};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn planning(c: &mut Criterion) {
    let reg = arraybridge::registry();
    c.bench_function("plan host->host", |b| {
        b.iter(|| {
            reg.plan(
                MemoryType::Host,
                Device::Cpu,
                MemoryType::Host,
                black_box(Device::Cpu),
            )
            .unwrap()
        })
    });
}

fn casting(c: &mut Criterion) {
    let n = 1 << 20;
    let src: Vec<u16> = (0..n).map(|i| (i % 65536) as u16).collect();
    let mut g = c.benchmark_group("cast 1M u16");
    g.throughput(Throughput::Bytes((n * 2) as u64));
    g.bench_function("to f32 lossless", |b| {
        b.iter(|| cast_slice::<u16, f32>(black_box(&src), CastMode::Lossless).unwrap())
    });
    g.bench_function("to u8 saturate", |b| {
        b.iter(|| cast_slice::<u16, u8>(black_box(&src), CastMode::Saturate).unwrap())
    });
    g.bench_function("to u8 rescale", |b| {
        b.iter(|| cast_slice::<u16, u8>(black_box(&src), CastMode::RescaleMinMax).unwrap())
    });
    g.finish();
}

criterion_group!(benches, planning, casting);
criterion_main!(benches);
