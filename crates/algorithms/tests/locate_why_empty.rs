//! [`why_empty`]: why `locate` found nothing in a frame, trackpy's reasons (its `UserWarning`s).
//! The comparison with trackpy's own warnings is `crates/bridge-python/tests/test_trackpy_drop.py`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use algorithms::detect::locate::locate;
use algorithms::detect::{Empty, FrameView, LocateParams, why_empty};
use algorithms::synth::SplitMix;
use ndarray::Array2;

/// Gaussian spots of peak `amp` at `centres` on noise of mean `base`, u8.
fn spots(h: usize, w: usize, centres: &[(f64, f64)], amp: f64, base: f64, seed: u64) -> Array2<u8> {
    let mut rng = SplitMix::new(seed);
    Array2::from_shape_fn((h, w), |(y, x)| {
        let mut v = base + rng.range(-3.0, 3.0);
        for &(cy, cx) in centres {
            let d2 = (y as f64 - cy).powi(2) + (x as f64 - cx).powi(2);
            v += amp * (-d2 / 4.5).exp();
        }
        v.clamp(0.0, 255.0) as u8
    })
}

fn why(img: &Array2<u8>, p: &LocateParams) -> Option<Empty> {
    let f = FrameView::U8(img.view());
    let r = why_empty(f, p).unwrap();
    // the reason is given exactly when locate finds nothing
    assert_eq!(r.is_none(), !locate(f, p).unwrap().is_empty(), "{r:?}");
    r
}

#[test]
fn each_reason_as_trackpy_checks_them() {
    let p = LocateParams::new(5);
    let raw = LocateParams {
        preprocess: false,
        ..LocateParams::new(5)
    };
    // black: nothing non-zero (after the bandpass, a flat image is black too)
    assert_eq!(why(&Array2::zeros((21, 23)), &raw), Some(Empty::Black));
    assert_eq!(
        why(&Array2::from_elem((30, 31), 50), &p),
        Some(Empty::Black)
    );
    // the only maximum is in the margin (trackpy's test_maxima_in_margin)
    let mut margin = Array2::from_elem((21, 23), 1u8);
    margin[[1, 1]] = 100;
    assert_eq!(why(&margin, &p), Some(Empty::InMargins));
    // a flat non-zero image has maxima everywhere, none above the 100th percentile
    let flat = LocateParams {
        percentile: 100.0,
        ..raw.clone()
    };
    assert_eq!(
        why(&Array2::from_elem((21, 23), 9), &flat),
        Some(Empty::NoMaxima)
    );
    // refined, then filtered (trackpy's test_all_maxima_filtered), on noise too
    let mut faint = Array2::from_elem((21, 23), 1u8);
    faint[[11, 13]] = 10;
    let heavy = LocateParams {
        minmass: 200.0,
        ..raw.clone()
    };
    assert_eq!(why(&faint, &heavy), Some(Empty::Filtered));
    let img = spots(40, 44, &[(12.3, 10.8), (25.6, 30.1)], 120.0, 20.0, 5);
    assert_eq!(why(&img, &p), None);
    let heavy = LocateParams {
        minmass: 1e6,
        ..LocateParams::new(5)
    };
    assert_eq!(why(&img, &heavy), Some(Empty::Filtered));
    assert!(
        Empty::Filtered
            .trackpy_warning()
            .starts_with("No maxima survived")
    );
    assert_eq!(Empty::InMargins.as_str(), "margins");
}

/// Frames of any size down to one pixel: a reason exactly when nothing is found (checked by
/// `why`), never a panic; one too small for a feature (5 pixels for a diameter of 5, margin 2)
/// always has a reason.
#[test]
fn tiny_frames_have_a_reason() {
    let p = LocateParams::new(5);
    for h in 1..9 {
        for w in [1, 3, 4, 5, 7] {
            let img = spots(h, w, &[(h as f64 / 2.0, w as f64 / 2.0)], 150.0, 10.0, 9);
            let r = why(&img, &p);
            if h < 5 || w < 5 {
                assert!(r.is_some(), "{h}x{w}");
            }
        }
    }
    let img = spots(23, 3, &[(11.0, 1.0)], 150.0, 10.0, 1);
    assert_eq!(why(&img, &p), Some(Empty::InMargins));
}
