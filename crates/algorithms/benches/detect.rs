//! Criterion benchmarks of detection and linking on the synthetic 512×512 frames of spec §6,
//! and on a real-like 424×640 u8 bright-field frame (issue #19).
//!
//! `CARGO_TARGET_DIR=... cargo bench -p algorithms --bench detect` (with `--features opencl`:
//! also `locate` on `opencl:0` against the CPU back end)
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use algorithms::detect::Precision;
use algorithms::detect::blob_log::{BlobLogParams, blob_log_frame, blob_log_frame_acc};
use algorithms::detect::locate::{LocateParams, locate};
use algorithms::detect::synth::synthetic_movie;
use algorithms::detect::{CpuBackend, DetectBackend, FrameView, LogDetector, Movie};
use algorithms::track::{LinkParams, link};
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let s = synthetic_movie(1, 512, 100, 1.0, 1);
    let Movie::U16(m) = &s.movie else {
        unreachable!()
    };
    let u16f = m.index_axis(ndarray::Axis(0), 0).to_owned();
    let f32f = u16f.mapv(f32::from);
    // the spec's reference call: f32 counts, threshold=None, threshold_rel=0.2, (1, 3, 10)
    let rel = BlobLogParams {
        max_sigma: 3.0,
        threshold: None,
        threshold_rel: Some(0.2),
        ..Default::default()
    };
    c.bench_function("blob_log 512x512 f32 (1,3,10) rel0.2", |b| {
        b.iter(|| blob_log_frame(black_box(FrameView::F32(f32f.view())), &rel).unwrap())
    });
    c.bench_function(
        "blob_log 512x512 f32 (1,3,10) rel0.2 fast f32 accumulation",
        |b| {
            b.iter(|| {
                blob_log_frame_acc(black_box(FrameView::F32(f32f.view())), &rel, Precision::F32)
                    .unwrap()
            })
        },
    );
    c.bench_function("blob_log 512x512 u16 legacy/f64 (1,3,10) rel0.2", |b| {
        b.iter(|| blob_log_frame(black_box(FrameView::U16(u16f.view())), &rel).unwrap())
    });
    // real-like frame (issue #19): 424×640 u8 bright field, ~700 spots of σ 2 px on a shaded
    // 150-grey background with grey noise 6 (as scripts/fixtures/brightfield_movie.py), the
    // exact f64 working type
    let real = brightfield_frame(424, 640, 700, 3);
    c.bench_function("blob_log 424x640 u8 real-like f64 (1,3,10) rel0.2", |b| {
        b.iter(|| blob_log_frame(black_box(FrameView::U8(real.view())), &rel).unwrap())
    });
    let lp = LocateParams {
        minmass: 200.0,
        ..LocateParams::new(7)
    };
    c.bench_function("locate 512x512 u16 d7 minmass200", |b| {
        b.iter(|| locate(black_box(FrameView::U16(u16f.view())), &lp).unwrap())
    });

    // locate on 8 frames of 512² u16: the CPU back end (frames in parallel) against the device
    // back end on opencl:0 (PoCL here), one batch call each; results are identical
    let movie8 = synthetic_movie(8, 512, 100, 1.0, 3);
    let views = movie8.movie.frames();
    let mut g = c.benchmark_group("locate 8x512x512 u16 d7 minmass200 (one batch)");
    g.sample_size(10);
    g.bench_function("cpu", |b| {
        b.iter(|| {
            CpuBackend::default()
                .locate_batch(black_box(&views), &lp)
                .unwrap()
        })
    });
    #[cfg(feature = "opencl")]
    match algorithms::exec::OpenClExecutor::new(
        bridge_opencl::backend(),
        bridge_core::Device::OpenCl(0),
    )
    .map(algorithms::detect::OpenClDetect::with_executor)
    {
        Ok(d) => {
            assert_eq!(
                d.locate_batch(&views, &lp).unwrap(),
                CpuBackend::default().locate_batch(&views, &lp).unwrap()
            );
            g.bench_function("opencl:0", |b| {
                b.iter(|| d.locate_batch(black_box(&views), &lp).unwrap())
            });
        }
        Err(e) => eprintln!("skipping the opencl:0 locate bench: {e}"),
    }
    g.finish();

    // movie throughput per batch size (16 frames of 512², u16, LogDetector defaults)
    let movie = synthetic_movie(16, 512, 100, 1.0, 2);
    let mut g = c.benchmark_group("LogDetector 16x512x512 u16");
    g.sample_size(10);
    for bs in [1, 2, 4, 8] {
        let det = LogDetector {
            batch_size: bs,
            ..Default::default()
        };
        g.bench_function(format!("batch {bs}"), |b| {
            b.iter(|| {
                det.detect_movie(
                    black_box(&movie.movie),
                    &algorithms::exec::DeviceHandle::cpu(),
                )
                .unwrap()
            })
        });
    }
    g.finish();

    // linking: 100 particles diffusing over 100 frames (truth positions)
    let tr = synthetic_movie(100, 256, 100, 1.5, 7).truth;
    let frames: Vec<i64> = tr.iter().map(|t| i64::from(t.frame)).collect();
    let pos: Vec<[f64; 2]> = tr.iter().map(|t| [t.y, t.x]).collect();
    let lp = LinkParams::new(5.0, 2);
    c.bench_function("link 100 frames x 100 particles sr5 mem2", |b| {
        b.iter(|| link(black_box(&frames), &pos, &lp).unwrap())
    });
    // trackpy's reference density: ~600 features per frame, memory 3
    let tr = synthetic_movie(50, 512, 600, 1.5, 8).truth;
    let frames: Vec<i64> = tr.iter().map(|t| i64::from(t.frame)).collect();
    let pos: Vec<[f64; 2]> = tr.iter().map(|t| [t.y, t.x]).collect();
    let lp = LinkParams::new(5.0, 3);
    c.bench_function("link 50 frames x 600 particles sr5 mem3", |b| {
        b.iter(|| link(black_box(&frames), &pos, &lp).unwrap())
    });
}

/// A bright-field-like u8 frame: `n` Gaussian spots (σ 2 px, amplitude 60) on a 150-grey
/// background with a slow shading and grey noise of 6, clipped to 0..=255.
fn brightfield_frame(h: usize, w: usize, n: usize, seed: u64) -> ndarray::Array2<u8> {
    let mut rng = algorithms::synth::SplitMix::new(seed);
    let mut img = ndarray::Array2::<f64>::from_shape_fn((h, w), |(y, x)| {
        150.0 + 10.0 * (x as f64 / 37.0).sin() * (y as f64 / 53.0).cos()
    });
    img.mapv_inplace(|v| v + 6.0 * rng.normal());
    for _ in 0..n {
        let (py, px) = (rng.range(0.0, h as f64), rng.range(0.0, w as f64));
        let (y0, x0) = (py as usize, px as usize);
        for y in y0.saturating_sub(8)..(y0 + 9).min(h) {
            for x in x0.saturating_sub(8)..(x0 + 9).min(w) {
                let d2 = (y as f64 - py).powi(2) + (x as f64 - px).powi(2);
                img[(y, x)] += 60.0 * (-d2 / 8.0).exp();
            }
        }
    }
    img.mapv(|v| v.clamp(0.0, 255.0) as u8)
}

criterion_group!(benches, bench);
criterion_main!(benches);
