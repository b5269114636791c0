//! Repeated `blob_log` (1, 3, 10) on a synthetic 512×512 frame, for timing and profiling:
//! `cargo run --release -p algorithms --example detect_timing -- [iterations] [f32|u16] [exact|fast]`.
//! Run under `/usr/bin/time` with `RAYON_NUM_THREADS=1` to get the CPU time per frame.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]
use std::time::Instant;

use algorithms::detect::Precision;
use algorithms::detect::blob_log::{BlobLogParams, blob_log_frame_acc};
use algorithms::detect::synth::synthetic_movie;
use algorithms::detect::{FrameView, Movie};

fn main() {
    let n: usize = std::env::args().nth(1).map_or(20, |s| s.parse().unwrap());
    let kind = std::env::args().nth(2).unwrap_or_else(|| "f32".into());
    let acc = if std::env::args().nth(3).as_deref() == Some("fast") {
        Precision::F32
    } else {
        Precision::F64
    };
    let s = synthetic_movie(1, 512, 100, 1.0, 1);
    let Movie::U16(m) = &s.movie else {
        unreachable!()
    };
    let u = m.index_axis(ndarray::Axis(0), 0).to_owned();
    let f = u.mapv(f32::from);
    let frame = if kind == "u16" {
        FrameView::U16(u.view())
    } else {
        FrameView::F32(f.view())
    };
    let p = BlobLogParams {
        max_sigma: 3.0,
        threshold: None,
        threshold_rel: Some(0.2),
        ..Default::default()
    };
    let mut times = Vec::new();
    let mut k = 0;
    for _ in 0..n {
        let t = Instant::now();
        k = blob_log_frame_acc(frame, &p, acc).unwrap().len();
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "blob_log {kind} {acc:?}: median {:?}, min {:?} per frame ({k} blobs)",
        times[n / 2],
        times[0]
    );
}
