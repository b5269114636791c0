//! CUDA transfer benchmark: H2D/D2H pageable and pinned-staged, D2D, from 1 MiB to 4 GiB, each
//! beside a plain `cuMemcpy` from pinned memory (`reference`) measured in the same run.
//!
//! Skips (exit 0) without a GPU, fails without one when `ARRAYBRIDGE_REQUIRE_GPU=1`.
//! `ARRAYBRIDGE_BENCH_MAX_MB` caps the sizes (default 4096). `ARRAYBRIDGE_BENCH_TABLE=1` prints
//! a quick best-of-N Markdown table instead of running criterion.

use std::sync::Arc;
use std::time::Duration;

use bridge_core::{DType, HostData};
use bridge_cuda::bench::{format_table, transfer_report};
use bridge_cuda::{Gpu, HostPath, gpu, probe, storage_of};
use criterion::{BenchmarkId, Criterion, Throughput};
use test_support::env_flag;

fn sizes() -> Vec<usize> {
    let max_mb: usize = bridge_core::tuning::process().usize_or("ARRAYBRIDGE_BENCH_MAX_MB", 4096);
    [1usize, 16, 256, 1024, 4096]
        .into_iter()
        .filter(|&mb| mb <= max_mb)
        .map(|mb| mb << 20)
        .collect()
}

fn bench(c: &mut Criterion, g: &Arc<Gpu>) -> bridge_core::Result<()> {
    for bytes in sizes() {
        let host = HostData::from_c_bytes(DType::U8, &[bytes], &vec![1u8; bytes])?;
        let dev = g.upload(&host)?;
        let dev2 = g.alloc(DType::U8, &[bytes])?;
        let mut pinned = g.alloc_pinned(bytes)?;
        let (d, d2) = (storage_of(&dev)?, storage_of(&dev2)?);
        // Run every path once so that an error ends the run here instead of being timed.
        g.upload_with(&host, HostPath::Pageable)?;
        g.download_with(&dev, HostPath::PinnedStaged)?;
        g.copy_pinned_to_device(d, &pinned)?;
        g.copy_device_to_pinned(&mut pinned, d)?;
        g.copy_device_to_device(d2, d)?;
        let samples = if bytes >= 1 << 30 { 10 } else { 20 };
        for dir in ["h2d", "d2h", "d2d"] {
            let mut group = c.benchmark_group(format!("cuda_{dir}"));
            group.throughput(Throughput::Bytes(bytes as u64));
            group.sample_size(samples);
            group.warm_up_time(Duration::from_millis(300));
            group.measurement_time(Duration::from_secs(2));
            let id = |p: &str| BenchmarkId::new(p, format!("{}MiB", bytes >> 20));
            match dir {
                "h2d" => {
                    group.bench_function(id("pageable"), |b| {
                        b.iter(|| g.upload_with(&host, HostPath::Pageable).map(drop))
                    });
                    group.bench_function(id("pinned-staged"), |b| {
                        b.iter(|| g.upload_with(&host, HostPath::PinnedStaged).map(drop))
                    });
                    group.bench_function(id("reference"), |b| {
                        b.iter(|| g.copy_pinned_to_device(d, &pinned))
                    });
                }
                "d2h" => {
                    group.bench_function(id("pageable"), |b| {
                        b.iter(|| g.download_with(&dev, HostPath::Pageable).map(drop))
                    });
                    group.bench_function(id("pinned-staged"), |b| {
                        b.iter(|| g.download_with(&dev, HostPath::PinnedStaged).map(drop))
                    });
                    group.bench_function(id("reference"), |b| {
                        b.iter(|| g.copy_device_to_pinned(&mut pinned, d))
                    });
                }
                _ => {
                    group.bench_function(id("device"), |b| b.iter(|| g.copy(&dev).map(drop)));
                    group.bench_function(id("reference"), |b| {
                        b.iter(|| g.copy_device_to_device(d2, d))
                    });
                }
            }
            group.finish();
        }
    }
    Ok(())
}

fn main() {
    if !probe::gpu_available() {
        assert!(
            !env_flag("ARRAYBRIDGE_REQUIRE_GPU"),
            "ARRAYBRIDGE_REQUIRE_GPU=1 but no CUDA device"
        );
        eprintln!("cuda_transfer: skipped (no CUDA device)");
        return;
    }
    let g = match gpu(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("cuda_transfer: {e}");
            std::process::exit(1);
        }
    };
    eprintln!("cuda_transfer on {} ({})", g.info().name, g.device());
    if env_flag("ARRAYBRIDGE_BENCH_TABLE") {
        match transfer_report(&g, &sizes(), 5) {
            Ok(rows) => println!("{}", format_table(&rows)),
            Err(e) => {
                eprintln!("cuda_transfer: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    if let Err(e) = bench(&mut c, &g) {
        eprintln!("cuda_transfer: {e}");
        std::process::exit(1);
    }
    c.final_summary();
}
