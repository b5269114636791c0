//! Repeated `locate` on a synthetic 512×512 frame, for profiling
//! (`cargo run --release -p algorithms --example locate_timing -- [iterations]`).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
use std::time::Instant;

use algorithms::detect::locate::{LocateParams, locate};
use algorithms::detect::synth::synthetic_movie;

fn main() {
    let n: usize = std::env::args().nth(1).map_or(20, |s| s.parse().unwrap());
    let s = synthetic_movie(1, 512, 100, 1.0, 1);
    let f = s.movie.frame(0).unwrap();
    let p = LocateParams {
        minmass: 200.0,
        ..LocateParams::new(7)
    };
    let t = Instant::now();
    let mut k = 0;
    for _ in 0..n {
        k += locate(f, &p).unwrap().len();
    }
    println!(
        "locate: {:?} per frame ({} features)",
        t.elapsed() / n as u32,
        k / n
    );
}
