//! Criterion benchmarks of linking 10⁴ and 10⁵ particles per frame (issue 19).
//!
//! Random walkers with known identities (`brownian`, mirrored bit for bit by
//! `scripts/fixtures/bench_link.py`, which times trackpy 0.7 and a globally optimal
//! frame-to-frame assignment on the same data). Each benchmark is one [`Linker::push_frame`]
//! of N points onto N tracks; the fraction of true links recovered over all frames is printed
//! once per case.
//!
//! `CARGO_TARGET_DIR=... cargo bench -p algorithms --bench track`
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use algorithms::synth::SplitMix;
use algorithms::track::{LinkParams, Linker, link};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

/// `n` walkers for `frames` frames, uniform in a square of `n / density` px², `sigma` px per
/// axis per frame: frames, `[y, x]`, rows frame-major and walker-minor (the walker is the row
/// index modulo `n`).
fn brownian(n: usize, frames: usize, density: f64, sigma: f64, seed: u64) -> Vec<Vec<[f64; 2]>> {
    let mut rng = SplitMix::new(seed);
    let side = (n as f64 / density).sqrt();
    let mut pos: Vec<[f64; 2]> = (0..n)
        .map(|_| {
            let y = rng.range(0.0, side);
            [y, rng.range(0.0, side)]
        })
        .collect();
    let mut out = Vec::with_capacity(frames);
    for _ in 0..frames {
        out.push(pos.clone());
        for p in &mut pos {
            p[0] += sigma * rng.normal();
            p[1] += sigma * rng.normal();
        }
    }
    out
}

/// (name, walkers, frames, density per px², sigma, search range, seed): as bench_link.py.
const CASES: [(&str, usize, usize, f64, f64, f64, u64); 3] = [
    ("1e4", 10_000, 6, 1.0 / 200.0, 1.0, 4.0, 1),
    ("1e4 dense", 10_000, 6, 1.0 / 40.0, 1.0, 4.0, 2),
    ("1e5", 100_000, 4, 1.0 / 200.0, 1.0, 4.0, 3),
];

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("link");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    for (name, n, frames, density, sigma, sr, seed) in CASES {
        let data = brownian(n, frames, density, sigma, seed);
        let p = LinkParams::new(sr, 0);
        // recovery of the true links over every frame, and the subnets met
        let fr: Vec<i64> = (0..frames).flat_map(|t| vec![t as i64; n]).collect();
        let pos: Vec<[f64; 2]> = data.iter().flatten().copied().collect();
        let (ids, stats) = link(&fr, &pos, &p).unwrap();
        let good = (0..frames - 1)
            .map(|t| {
                (0..n)
                    .filter(|&i| ids[t * n + i] == ids[(t + 1) * n + i])
                    .count()
            })
            .sum::<usize>();
        eprintln!(
            "link {name}: first point {:?}, {:.6} of true links recovered, {stats:?}",
            data[0][0],
            good as f64 / ((frames - 1) * n) as f64
        );
        let mut after_first = Linker::new(p).unwrap();
        after_first.push_frame(0, &data[0]).unwrap();
        g.bench_function(format!("push_frame {name} ({n} points, sr {sr})"), |b| {
            b.iter_batched(
                || after_first.clone(),
                |mut l| l.push_frame(1, black_box(&data[1])).unwrap(),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
