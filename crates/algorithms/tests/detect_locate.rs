//! trackpy `locate` against the trackpy 0.7 golden CSVs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use algorithms::detect::FrameView;
use algorithms::detect::locate::{LocateParams, locate};
use common::{load_csv, load_npy};
use ndarray::ArrayView2;

fn compare(
    name: &str,
    got: &[algorithms::detect::Feature],
    golden: &common::Table,
    rows: &[usize],
) {
    assert_eq!(got.len(), rows.len(), "{name}: feature count");
    let cols = ["y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep"];
    let mut worst = [0.0f64; 8];
    for (f, &ri) in got.iter().zip(rows) {
        let row = &golden.rows[ri];
        let vals = [f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep];
        for (k, c) in cols.iter().enumerate() {
            let want: f64 = row[golden.col(c)].parse().unwrap();
            let err = if k < 2 {
                (vals[k] - want).abs()
            } else {
                (vals[k] - want).abs() / want.abs().max(1e-12)
            };
            worst[k] = worst[k].max(err);
        }
    }
    eprintln!(
        "{name}: {} features; max |Δy|,|Δx| = {:e}, {:e}; max rel err mass {:e} size {:e} ecc {:e} signal {:e} raw_mass {:e} ep {:e}",
        got.len(),
        worst[0],
        worst[1],
        worst[2],
        worst[3],
        worst[4],
        worst[5],
        worst[6],
        worst[7]
    );
    assert!(worst[0] <= 1e-6 && worst[1] <= 1e-6, "{name}: positions");
    for (k, w) in worst.iter().enumerate().skip(2) {
        assert!(*w <= 1e-6, "{name}: column {} rel err {w:e}", cols[k]);
    }
}

#[test]
fn locate_hisnr_d7() {
    let n = load_npy("blob_log/hisnr_u16.npy");
    let data = n.u16s();
    let v = ArrayView2::from_shape((n.shape[0], n.shape[1]), &data).unwrap();
    let p = LocateParams {
        minmass: 150.0,
        ..LocateParams::new(7)
    };
    let got = locate(FrameView::U16(v), &p).unwrap();
    let golden = load_csv("locate/hisnr_u16__locate_d7.csv");
    compare(
        "hisnr d7",
        &got,
        &golden,
        &(0..golden.rows.len()).collect::<Vec<_>>(),
    );
}

#[test]
fn locate_movie_frame0_d9() {
    let n = load_npy("movie/movie_u16.npy");
    let data = n.u16s();
    let (h, w) = (n.shape[1], n.shape[2]);
    let v = ArrayView2::from_shape((h, w), &data[..h * w]).unwrap();
    let p = LocateParams {
        minmass: 500.0,
        ..LocateParams::new(9)
    };
    let got = locate(FrameView::U16(v), &p).unwrap();
    let golden = load_csv("locate/movie_frame0__locate_d9.csv");
    compare(
        "movie frame0 d9",
        &got,
        &golden,
        &(0..golden.rows.len()).collect::<Vec<_>>(),
    );
}

#[test]
fn locate_movie_d7_all_frames() {
    let n = load_npy("movie/movie_u16.npy");
    let data = n.u16s();
    let (t, h, w) = (n.shape[0], n.shape[1], n.shape[2]);
    let golden = load_csv("movie/movie__locate_d7.csv");
    let frames = golden.f64col("frame");
    let p = LocateParams {
        minmass: 300.0,
        ..LocateParams::new(7)
    };
    let mut total = 0;
    for k in 0..t {
        let v = ArrayView2::from_shape((h, w), &data[k * h * w..(k + 1) * h * w]).unwrap();
        let got = locate(FrameView::U16(v), &p).unwrap();
        let rows: Vec<usize> = frames
            .iter()
            .enumerate()
            .filter(|(_, f)| **f as usize == k)
            .map(|(i, _)| i)
            .collect();
        compare(&format!("movie frame {k} d7"), &got, &golden, &rows);
        total += got.len();
    }
    assert_eq!(total, 732);
}

#[test]
fn locate_errors() {
    let a = ndarray::Array2::<u16>::zeros((32, 32));
    assert!(locate(FrameView::U16(a.view()), &LocateParams::new(8)).is_err());
    assert!(
        locate(FrameView::U16(a.view()), &LocateParams::new(7))
            .unwrap()
            .is_empty()
    );
}

/// Float input takes trackpy's float path (threshold 1/255, u8 gamut); the features agree
/// with the integer path on the same frame (hisnr_f32 = hisnr_u16 / 161).
#[test]
fn locate_float_input_agrees_with_integer_input() {
    let n = load_npy("blob_log/hisnr_f32.npy");
    let data = n.f32s();
    let v = ArrayView2::from_shape((n.shape[0], n.shape[1]), &data).unwrap();
    let p = LocateParams {
        minmass: 150.0 / 161.0,
        ..LocateParams::new(7)
    };
    let got = locate(FrameView::F32(v), &p).unwrap();
    let golden = load_csv("locate/hisnr_u16__locate_d7.csv");
    let (gy, gx) = (golden.f64col("y"), golden.f64col("x"));
    let close = gy
        .iter()
        .zip(&gx)
        .filter(|(y, x)| got.iter().any(|f| (f.y - **y).hypot(f.x - **x) < 0.1))
        .count();
    eprintln!(
        "float path: {} features, {close}/{} within 0.1 px of the integer path",
        got.len(),
        gy.len()
    );
    assert!(close >= 90);
}
