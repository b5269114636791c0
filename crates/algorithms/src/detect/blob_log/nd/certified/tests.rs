//! The n-D certified search gives the exact path's peaks, values, order and threshold, bit for
//! bit, on random real-like volumes of every pixel type (and says when it cannot).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ndarray::{ArrayD, IxDyn};

use super::super::{
    BlobLogNdParams, Border, CpuKnobs, Sigma, VolumeView, blob_log_nd_view_in, laplace, params,
    peaks, sigma_table, threshold_of,
};
use super::*;
use crate::exec::DeviceHandle;
use test_support::spots::{Rng, Spots};

/// Gaussian spots (amplitudes 0.3–0.9, σ² 2.25) on a floor of 0.1 with noise of `noise`.
fn spots(shape: &[usize], count: usize, noise: f64, rng: &mut Rng) -> Vec<f64> {
    Spots {
        count,
        noise,
        ..Spots::default()
    }
    .image(shape, rng)
}

/// The parameter sets every volume runs with.
fn param_sets(ndim: usize) -> Vec<BlobLogNdParams> {
    let per_axis: Vec<f64> = (0..ndim).map(|a| 1.0 + 0.5 * a as f64).collect();
    vec![
        BlobLogNdParams {
            min_sigma: Sigma::Scalar(1.0),
            max_sigma: Sigma::Scalar(3.0),
            num_sigma: 5,
            threshold: None,
            threshold_rel: Some(0.1),
            ..BlobLogNdParams::default()
        },
        BlobLogNdParams {
            min_sigma: Sigma::PerAxis(per_axis.clone()),
            max_sigma: Sigma::PerAxis(per_axis.iter().map(|s| 2.0 * s).collect()),
            num_sigma: 4,
            threshold: Some(0.01),
            log_scale: true,
            exclude_border: Border::All(1),
            ..BlobLogNdParams::default()
        },
        BlobLogNdParams {
            min_sigma: Sigma::Scalar(1.5),
            max_sigma: Sigma::Scalar(2.5),
            num_sigma: 3,
            threshold: Some(0.0),
            threshold_rel: Some(0.3),
            ..BlobLogNdParams::default()
        },
        // a relative threshold above 1 (no peak) and a negative absolute one
        BlobLogNdParams {
            num_sigma: 3,
            max_sigma: Sigma::Scalar(2.0),
            threshold: None,
            threshold_rel: Some(1.5),
            ..BlobLogNdParams::default()
        },
        BlobLogNdParams {
            num_sigma: 3,
            max_sigma: Sigma::Scalar(2.0),
            threshold: Some(-0.02),
            threshold_rel: Some(-0.5),
            ..BlobLogNdParams::default()
        },
    ]
}

/// One volume in every pixel type: f64, f32 (its own f32 reference), u16 and u8 (quantised:
/// many ties in the cube).
fn typed(shape: &[usize], vals: &[f64]) -> Vec<(&'static str, Typed)> {
    let max = vals.iter().fold(0f64, |m, &v| m.max(v));
    let dim = IxDyn(shape);
    vec![
        (
            "f64",
            Typed::F64(ArrayD::from_shape_vec(dim.clone(), vals.to_vec()).unwrap()),
        ),
        (
            "f32",
            Typed::F32(
                ArrayD::from_shape_vec(dim.clone(), vals.iter().map(|&v| v as f32).collect())
                    .unwrap(),
            ),
        ),
        (
            "u16",
            Typed::U16(
                ArrayD::from_shape_vec(
                    dim.clone(),
                    vals.iter().map(|&v| (v / max * 60000.0) as u16).collect(),
                )
                .unwrap(),
            ),
        ),
        (
            "u8",
            Typed::U8(
                ArrayD::from_shape_vec(dim, vals.iter().map(|&v| (v / max * 40.0) as u8).collect())
                    .unwrap(),
            ),
        ),
    ]
}

enum Typed {
    F64(ArrayD<f64>),
    F32(ArrayD<f32>),
    U16(ArrayD<u16>),
    U8(ArrayD<u8>),
}

impl Typed {
    fn view(&self) -> VolumeView<'_> {
        match self {
            Typed::F64(a) => VolumeView::F64(a.view()),
            Typed::F32(a) => VolumeView::F32(a.view()),
            Typed::U16(a) => VolumeView::U16(a.view()),
            Typed::U8(a) => VolumeView::U8(a.view()),
        }
    }

    /// The image as the pipeline sees it: f64 values of the working type.
    fn values(&self) -> Vec<f64> {
        match self {
            Typed::F64(a) => a.iter().copied().collect(),
            Typed::F32(a) => a.iter().map(|&v| f64::from(v)).collect(),
            Typed::U16(a) => a.iter().map(|&v| f64::from(v) * (1.0 / 65535.0)).collect(),
            Typed::U8(a) => a.iter().map(|&v| f64::from(v) * (1.0 / 255.0)).collect(),
        }
    }
}

/// `certified_peaks` against the exact cube's search, in the working type `T`: `Some(true)`
/// when it applied (and agreed), `Some(false)` when it declined.
fn compare<T: Real>(img: &[f64], shape: &[usize], p: &BlobLogNdParams, name: &str) -> bool {
    let res = p.resolve(shape).unwrap();
    let sigmas = sigma_table::<T>(&res.min_sigma, &res.max_sigma, p.num_sigma, p.log_scale);
    let scales: Vec<T> = sigmas.iter().map(|r| params::scale_factor(r)).collect();
    let thresholds = (p.threshold, p.threshold_rel);
    let got = certified_peaks(img, shape, (&sigmas, &scales), thresholds, &res.border);
    let (cube, lo, hi) = laplace::log_cube_nd(img, shape, &sigmas, &scales);
    let thr = threshold_of(thresholds, (lo, hi));
    let want = peaks::find_peaks_nd(&cube, shape, sigmas.len(), (thr, lo, hi), &res.border);
    let Some((cands, t)) = got else {
        return false;
    };
    let key = |c: &Cand<T>| (c.idx, c.s, c.v.to_f64().to_bits());
    assert_eq!(
        t.to_f64().to_bits(),
        thr.to_f64().to_bits(),
        "{name}: threshold"
    );
    assert_eq!(
        cands.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>(),
        "{name}: peaks"
    );
    true
}

/// Random real-like volumes (1-D to 4-D, sparse and dense spots, low and high noise) in every
/// pixel type and three parameter sets: the certified search's peaks are the exact ones
/// wherever it applies, it applies to most, and the whole pipeline's rows agree with the
/// certified search on and off.
#[test]
fn certified_search_equals_the_exact_one() {
    if Simd::detect().level() == Level::Plain {
        eprintln!("no AVX2: the certified search never runs here");
        return;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let shapes: [&[usize]; 6] = [
        &[9, 23, 31],
        &[17, 29],
        &[60],
        &[5, 6, 11, 13],
        &[12, 40, 36],
        &[3, 50, 50],
    ];
    let (mut applied, mut total, mut rows) = (0, 0, 0);
    let exact = CpuKnobs {
        certified: false,
        ..CpuKnobs::default()
    };
    let certified = CpuKnobs {
        certified: true,
        ..CpuKnobs::default()
    };
    for shape in shapes {
        let n: usize = shape.iter().product();
        for (count, noise) in [((n / 300).max(2), 0.05), ((n / 40).max(3), 0.3)] {
            let vals = spots(shape, count, noise, &mut rng);
            for (dtype, img) in typed(shape, &vals) {
                let values = img.values();
                for (j, p) in param_sets(shape.len()).iter().enumerate() {
                    let name = format!("{shape:?} {dtype} spots {count} noise {noise} params {j}");
                    let ok = if dtype == "f32" {
                        compare::<f32>(&values, shape, p, &name)
                    } else {
                        compare::<f64>(&values, shape, p, &name)
                    };
                    applied += usize::from(ok);
                    total += 1;
                    let cpu = DeviceHandle::cpu();
                    let a = blob_log_nd_view_in(&cpu, img.view(), p, &exact).unwrap();
                    let b = blob_log_nd_view_in(&cpu, img.view(), p, &certified).unwrap();
                    assert_eq!(a, b, "{name}: rows");
                    rows += a.rows.len();
                }
            }
        }
    }
    eprintln!("certified search applied to {applied} of {total} cases ({rows} rows in all)");
    assert!(applied * 4 >= total * 3, "applied to {applied} of {total}");
    assert!(rows > 200, "{rows} rows");
}

/// Where the search cannot decide cheaply it declines, and the pipeline's rows are the exact
/// path's: a constant volume, no threshold at all (every voxel above the cube's minimum), and
/// kernels wider than the volume.
#[test]
fn it_declines_what_it_cannot_settle() {
    if Simd::detect().level() == Level::Plain {
        return;
    }
    let shape = [6usize, 7, 8];
    let flat = vec![0.5f64; 6 * 7 * 8];
    let p = BlobLogNdParams {
        min_sigma: Sigma::Scalar(1.0),
        max_sigma: Sigma::Scalar(2.0),
        num_sigma: 3,
        threshold: Some(0.1),
        ..BlobLogNdParams::default()
    };
    assert!(!compare::<f64>(&flat, &shape, &p, "constant"));
    let mut rng = Rng(5);
    let vals = spots(&shape, 3, 0.05, &mut rng);
    let none = BlobLogNdParams {
        threshold: None,
        threshold_rel: None,
        ..p.clone()
    };
    let wide = BlobLogNdParams {
        min_sigma: Sigma::Scalar(8.0),
        max_sigma: Sigma::Scalar(9.0),
        ..p.clone()
    };
    for (q, name) in [(&none, "no threshold"), (&wide, "wide kernels")] {
        assert!(!compare::<f64>(&vals, &shape, q, name), "{name}");
        let img = ArrayD::from_shape_vec(IxDyn(&shape), vals.clone()).unwrap();
        let cpu = DeviceHandle::cpu();
        let on = CpuKnobs::default();
        let off = CpuKnobs {
            certified: false,
            ..on
        };
        let a = blob_log_nd_view_in(&cpu, VolumeView::F64(img.view()), q, &on).unwrap();
        let b = blob_log_nd_view_in(&cpu, VolumeView::F64(img.view()), q, &off).unwrap();
        assert_eq!(a, b, "{name}");
    }
}

/// The f32 cube is within the bound of the exact one everywhere, with room (the largest error
/// seen is well under the bound, which is a worst case): f64 and f32 references, 1-D to 4-D,
/// scalar and per-axis σ.
#[test]
fn the_bound_holds_with_room() {
    let mut rng = Rng(11);
    let shapes: [&[usize]; 4] = [&[80], &[21, 33], &[9, 23, 31], &[5, 6, 11, 13]];
    let mut worst = 0f64;
    for shape in shapes {
        let n: usize = shape.iter().product();
        let vals = spots(shape, (n / 200).max(2), 0.2, &mut rng);
        for p in param_sets(shape.len()) {
            let res = p.resolve(shape).unwrap();
            for f32_ref in [false, true] {
                let (sigmas, scales, img): (Vec<Vec<f64>>, Vec<f64>, Vec<f64>) = if f32_ref {
                    let s = sigma_table::<f32>(
                        &res.min_sigma,
                        &res.max_sigma,
                        p.num_sigma,
                        p.log_scale,
                    );
                    let sc: Vec<f32> = s.iter().map(|r| params::scale_factor(r)).collect();
                    (
                        s.iter()
                            .map(|r| r.iter().map(|&v| f64::from(v)).collect())
                            .collect(),
                        sc.iter().map(|&v| f64::from(v)).collect(),
                        vals.iter().map(|&v| f64::from(v as f32)).collect(),
                    )
                } else {
                    let s = sigma_table::<f64>(
                        &res.min_sigma,
                        &res.max_sigma,
                        p.num_sigma,
                        p.log_scale,
                    );
                    let sc = s.iter().map(|r| params::scale_factor(r)).collect();
                    (s, sc, vals.clone())
                };
                let exact: Vec<f64> = if f32_ref {
                    let s32: Vec<Vec<f32>> = sigmas
                        .iter()
                        .map(|r| r.iter().map(|&v| v as f32).collect())
                        .collect();
                    let sc32: Vec<f32> = scales.iter().map(|&v| v as f32).collect();
                    let (c, _, _) = laplace::log_cube_nd(&img, shape, &s32, &sc32);
                    c.iter().map(|&v| f64::from(v)).collect()
                } else {
                    laplace::log_cube_nd(&img, shape, &sigmas, &scales).0
                };
                // the kernels as the search builds them (f32 σ for an f32 reference)
                let planes: Vec<PlaneKernels<f64>> = sigmas
                    .iter()
                    .zip(&scales)
                    .map(|(row, &sc)| {
                        let ks = row.iter().map(|&s| LogKernels::new(s, f32_ref)).collect();
                        (ks, sc)
                    })
                    .collect();
                let m = img.iter().fold(0f64, |a, v| a.max(v.abs()));
                let b = error_bound(&planes, m, f32_ref);
                let approx = f32_cube(&img, shape, &planes);
                let err = exact
                    .iter()
                    .zip(&approx)
                    .fold(0f64, |a, (x, &y)| a.max((x - f64::from(y)).abs()));
                assert!(
                    err <= b,
                    "{shape:?} f32 reference {f32_ref}: error {err:e} > bound {b:e}"
                );
                worst = worst.max(err / b);
            }
        }
    }
    eprintln!("largest error / bound: {worst:.3}");
    assert!(worst < 0.5, "little room: {worst}");
}
