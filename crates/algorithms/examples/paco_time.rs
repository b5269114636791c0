//! Time PACO on a synthetic ADI cube: best wall time and process CPU time per run.
//!
//! `cargo run --release -p algorithms --example paco_time [T N REPS MODES]`
//! (MODES: bit mask, 1 = no sub-pixel, 2 = sub-pixel table, 4 = VIP FFT, 8 = quintic B-spline;
//! default 15).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use algorithms::paco::bench::synthetic_adi;
use algorithms::paco::{PacoParams, PsfNorm, SubPixel, Variant, paco};

fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (t, n, reps) = (
        *args.first().unwrap_or(&61),
        *args.get(1).unwrap_or(&100),
        *args.get(2).unwrap_or(&10),
    );
    let modes = *args.get(3).unwrap_or(&15);
    let (cube, angles, psf) = synthetic_adi(t, n, 7);
    for (bit, (name, sub)) in [
        ("no sub-pixel", SubPixel::Off),
        ("sub-pixel table q=32", SubPixel::Table { q: 32 }),
        ("sub-pixel VIP FFT", SubPixel::VipFft),
        ("sub-pixel quintic spline", SubPixel::Spline5),
    ]
    .into_iter()
    .enumerate()
    {
        if modes & (1 << bit) == 0 {
            continue;
        }
        let p = PacoParams {
            variant: Variant::Vip,
            subpixel: sub,
            psf_norm: PsfNorm::Factor(9.54),
            ..Default::default()
        };
        let reps = if sub == SubPixel::VipFft { 1 } else { reps };
        if reps > 1 {
            let _ = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
        }
        let (mut best, c0) = (f64::INFINITY, cpu_seconds());
        for _ in 0..reps {
            let t0 = Instant::now();
            let _ = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
            best = best.min(t0.elapsed().as_secs_f64());
        }
        let cpu = (cpu_seconds() - c0) / reps as f64;
        println!(
            "{t}x{n}x{n} {name}: best wall {best:.3} s, CPU {cpu:.3} s per run ({} threads)",
            rayon::current_num_threads()
        );
    }
}
