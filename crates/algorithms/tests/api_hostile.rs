//! The library's public functions on hostile input, called as a Rust program calls them (no
//! front end's checks before): a typed error or a documented result, never a panic (an
//! overflow in a debug build, an index out of range), an abort or a silently wrong result
//! (a third probing, 2026-11-28).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use algorithms::detect::blob_log::{
    BlobLogParams, blob_log_typed, log_cube, peaks_and_prune, sigma_list,
};
use algorithms::detect::{Blob, FrameView, RefineParams, refine_blobs};
use algorithms::paco::{calibrated_snr, disk_area, disk_offsets};
use algorithms::track::{LinkParams, Predictor, VelocityPredict, link_nd};
use ndarray::Array2;

#[test]
fn a_sigma_list_of_no_scales_is_empty() {
    assert!(sigma_list::<f64>(1.0, 2.0, 0, false).is_empty());
    assert!(sigma_list::<f32>(1.0, 2.0, 0, true).is_empty());
    assert_eq!(sigma_list::<f64>(1.0, 2.0, 1, false), [1.0]);
}

#[test]
fn blob_log_shapes_that_overflow_or_disagree_are_errors() {
    let p = BlobLogParams::default();
    assert!(blob_log_typed::<f64>(&[0.0, 1.0], usize::MAX, 2, &p).is_err());
    // a cube of another length than its planes
    assert!(peaks_and_prune::<f64>(&[0.0, 1.0, 0.5, 0.2], 10, 10, &[1.0, 2.0], &p).is_err());
    let cube = vec![0.5f64; 2 * 4 * 4];
    assert!(peaks_and_prune::<f64>(&cube, 4, 4, &[1.0, 2.0], &p).is_ok());
}

#[test]
fn log_cube_checks_its_image_its_sigmas_and_its_memory() {
    let img = vec![1.0f64; 16];
    assert!(log_cube::<f64>(&[1.0, 2.0], 10, 10, &[1.0]).is_err());
    assert!(log_cube::<f64>(&[], usize::MAX, 2, &[1.0]).is_err());
    for s in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(log_cube::<f64>(&img, 4, 4, &[s]).is_err(), "σ {s}");
    }
    // kernels of 4·10¹² taps a side: refused before anything is allocated
    assert!(log_cube::<f64>(&img, 4, 4, &[1e12]).is_err());
    assert_eq!(log_cube::<f64>(&img, 4, 4, &[1.0, 2.0]).unwrap().len(), 32);
}

#[test]
fn refining_blobs_of_an_empty_frame_or_nowhere_is_an_error() {
    let blob = Blob {
        y: 0.0,
        x: 0.0,
        sigma: 1.0,
        response: 1.0,
        scale_index: 0,
    };
    let empty = Array2::<f64>::zeros((0, 5));
    assert!(
        refine_blobs(
            FrameView::F64(empty.view()),
            &[blob],
            &RefineParams::default()
        )
        .is_err()
    );
    let frame = Array2::<f64>::zeros((8, 8));
    let nowhere = Blob {
        y: f64::NAN,
        ..blob
    };
    assert!(
        refine_blobs(
            FrameView::F64(frame.view()),
            &[nowhere],
            &RefineParams::default()
        )
        .is_err()
    );
    assert_eq!(
        refine_blobs(
            FrameView::F64(frame.view()),
            &[blob],
            &RefineParams::default()
        )
        .unwrap()
        .len(),
        1
    );
}

#[test]
fn linking_positions_without_coordinates_is_an_error() {
    let p = LinkParams {
        predictor: Predictor::NearestVelocity(VelocityPredict::default()),
        ..LinkParams::new(1.0, 0)
    };
    assert!(link_nd::<0>(&[0, 1, 2], &[[], [], []], &p).is_err());
    assert!(link_nd::<0>(&[0, 1], &[[], []], &LinkParams::new(1.0, 0)).is_err());
}

#[test]
fn paco_geometry_of_absurd_radii_does_not_overflow_or_hang() {
    assert_eq!(disk_area(1 << 40), usize::MAX);
    assert_eq!(disk_area(usize::MAX), usize::MAX);
    assert_eq!(disk_area(3), disk_offsets(3).len());
    assert_eq!(disk_area(0), 1);
}

#[test]
fn calibrated_snr_of_an_empty_map_or_a_far_centre() {
    let empty = Array2::<f64>::zeros((0, 0));
    assert_eq!(calibrated_snr(&empty, (0.0, 0.0), &[], 1.0).dim(), (0, 0));
    let map = Array2::from_shape_fn((16, 16), |(y, x)| ((y * 7 + x * 3) % 11) as f64 - 5.0);
    for c in [(1e300, -1e300), (1e10, 0.0), (f64::NAN, 0.0)] {
        let out = calibrated_snr(&map, c, &[], 1.0);
        assert_eq!(out.dim(), (16, 16), "{c:?}");
    }
    // a centre far away: every pixel in a few wide annuli, finite where they hold 8 pixels
    let near = calibrated_snr(&map, (8.0, 8.0), &[], 1.0);
    assert!(near.iter().any(|v| v.is_finite()));
}
