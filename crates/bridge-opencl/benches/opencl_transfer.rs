//! Host ↔ OpenCL copy throughput (blocking `clEnqueueWriteBuffer` / `clEnqueueReadBuffer` into a
//! pooled buffer) next to a plain host `memcpy` of the same sizes, from the same run.
//!
//! `cargo bench -p bridge-opencl --bench opencl_transfer -- --warm-up-time 1 --measurement-time 2`
//!
//! Without an OpenCL device only the memcpy baseline runs (a note is printed).

// criterion's macros generate undocumented public functions.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use bridge_core::Device;
use bridge_core::backend::Backend;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const MB: usize = 1 << 20;
/// 1 MB … 1 GB. `ARRAYBRIDGE_BENCH_MAX_MB` caps the largest size (e.g. 256 on small machines).
const SIZES_MB: [usize; 6] = [1, 4, 16, 64, 256, 1024];

fn max_mb() -> usize {
    bridge_core::tuning::process()
        .usize_knob("ARRAYBRIDGE_BENCH_MAX_MB")
        .unwrap_or(usize::MAX)
}

fn transfers(c: &mut Criterion) {
    let backend = bridge_opencl::backend();
    let device = match backend.devices() {
        Ok(d) if !d.is_empty() => {
            eprintln!("OpenCL device: {} ({})", d[0].device, d[0].name);
            Some(Device::OpenCl(0))
        }
        other => {
            eprintln!(
                "note: no OpenCL device ({:?}); only the memcpy baseline runs",
                other.err()
            );
            None
        }
    };
    for &mb in SIZES_MB.iter().filter(|&&mb| mb <= max_mb()) {
        let n = mb * MB;
        let src: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; n];
        let mut group = c.benchmark_group(format!("transfer_{mb}MB"));
        group.throughput(Throughput::Bytes(n as u64));
        group.sample_size(10);
        group.bench_function(BenchmarkId::new("memcpy", mb), |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&src));
                black_box(&mut dst);
            });
        });
        if let Some(dev) = device {
            let buf = backend.alloc(dev, n).unwrap();
            group.bench_function(BenchmarkId::new("host_to_opencl", mb), |b| {
                b.iter(|| buf.write(0, black_box(&src)).unwrap());
            });
            group.bench_function(BenchmarkId::new("opencl_to_host", mb), |b| {
                b.iter(|| {
                    buf.read(0, black_box(&mut dst)).unwrap();
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, transfers);
criterion_main!(benches);
