//! Unit tests of the n-D `blob_log`: validation errors, 1-D and 3-D inputs, the σ table, the
//! passes against a direct correlation, the pair search against brute force.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ndarray::{ArrayD, IxDyn};

use super::*;
use crate::detect::filters::{Boundary, LogKernels, map_index};

fn gauss_image(dims: &[usize], centres: &[Vec<f64>], s: f64) -> ArrayD<f64> {
    ArrayD::from_shape_fn(IxDyn(dims), |ix| {
        centres
            .iter()
            .map(|c| {
                let r2: f64 = c
                    .iter()
                    .enumerate()
                    .map(|(a, &ca)| (ix[a] as f64 - ca).powi(2))
                    .sum();
                (-r2 / (2.0 * s * s)).exp()
            })
            .sum()
    })
}

fn err_of(img: &ArrayD<f64>, p: &BlobLogNdParams) -> String {
    match blob_log_nd(img.view(), p) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("no error for {p:?}"),
    }
}

#[test]
fn invalid_parameters_are_typed_errors() {
    let img = gauss_image(&[8, 9, 10], &[vec![4.0, 4.0, 5.0]], 1.5);
    let d = BlobLogNdParams::default;
    let cases: Vec<(BlobLogNdParams, &str)> = vec![
        (
            BlobLogNdParams {
                min_sigma: Sigma::PerAxis(vec![1.0, 1.0]),
                ..d()
            },
            "min_sigma",
        ),
        (
            BlobLogNdParams {
                max_sigma: Sigma::PerAxis(vec![1.0, 2.0, 3.0, 4.0]),
                ..d()
            },
            "max_sigma",
        ),
        (
            BlobLogNdParams {
                min_sigma: Sigma::PerAxis(vec![1.0, -1.0, 1.0]),
                ..d()
            },
            "min_sigma",
        ),
        (
            BlobLogNdParams {
                max_sigma: Sigma::Scalar(f64::NAN),
                ..d()
            },
            "max_sigma",
        ),
        (
            BlobLogNdParams {
                min_sigma: Sigma::Scalar(0.0),
                ..d()
            },
            "min_sigma",
        ),
        (
            BlobLogNdParams {
                max_sigma: Sigma::Scalar(1e5),
                ..d()
            },
            "max_sigma",
        ),
        (
            BlobLogNdParams {
                min_sigma: Sigma::PerAxis(vec![1.0, 4.0, 1.0]),
                max_sigma: Sigma::PerAxis(vec![3.0, 3.0, 3.0]),
                ..d()
            },
            "min_sigma",
        ),
        (
            BlobLogNdParams {
                num_sigma: 0,
                ..d()
            },
            "num_sigma",
        ),
        (
            BlobLogNdParams {
                num_sigma: MAX_NUM_SIGMA + 1,
                ..d()
            },
            "num_sigma",
        ),
        (
            BlobLogNdParams {
                threshold: Some(f64::INFINITY),
                ..d()
            },
            "threshold",
        ),
        (
            BlobLogNdParams {
                threshold_rel: Some(f64::NAN),
                ..d()
            },
            "threshold_rel",
        ),
        (
            BlobLogNdParams {
                overlap: 1.5,
                ..d()
            },
            "overlap",
        ),
        (
            BlobLogNdParams {
                exclude_border: Border::PerAxis(vec![1, 2]),
                ..d()
            },
            "exclude_border",
        ),
    ];
    for (p, name) in cases {
        let e = err_of(&img, &p);
        assert!(e.contains(name), "{name}: {e}");
    }
}

use crate::detect::blob_log::MAX_NUM_SIGMA;

#[test]
fn invalid_images_are_typed_errors() {
    let p = BlobLogNdParams::default();
    // ndim 0, an empty axis
    let zero = ArrayD::<f64>::zeros(IxDyn(&[]));
    assert!(err_of(&zero, &p).contains("0-dimensional"));
    let empty = ArrayD::<f64>::zeros(IxDyn(&[4, 0, 3]));
    assert!(err_of(&empty, &p).contains("empty"));
    // non-finite pixels
    let mut nan = ArrayD::<f64>::zeros(IxDyn(&[4, 5]));
    nan[[1, 2]] = f64::NAN;
    assert!(err_of(&nan, &p).contains("non-finite"));
    // values that would overflow the float32 scale space
    let mut big = ArrayD::<f32>::zeros(IxDyn(&[4, 5, 6]));
    big[[1, 2, 3]] = 1e38;
    assert!(blob_log_nd(big.view(), &p).is_err());
    // a huge volume: the memory check refuses it before allocating (an 8 GiB view of one
    // byte repeated through zero strides)
    let one = [7u8];
    let huge = ndarray::ArrayView::from_shape(
        ndarray::ShapeBuilder::strides(IxDyn(&[2048, 2048, 2048]), IxDyn(&[0, 0, 0])),
        &one[..],
    )
    .unwrap();
    let e = blob_log_nd_view(VolumeView::U8(huge), &p).unwrap_err();
    assert!(
        matches!(e, bridge_core::BridgeError::TooLarge { .. }),
        "{e}"
    );
}

/// `exclude_border=True` is the int 1 (scikit-image 0.26), `False` no border.
#[test]
fn border_from_bool() {
    assert_eq!(Border::from_bool(true), Border::All(1));
    assert_eq!(Border::from_bool(false), Border::None);
    assert_eq!(Border::All(1).widths(3).unwrap(), vec![1, 1, 1]);
    assert!(Border::PerAxis(vec![1]).widths(2).is_err());
}

/// A 1-D signal: its blobs at the peaks, one σ column, and the output is deterministic.
#[test]
fn one_dimensional_blobs() {
    let img = gauss_image(&[120], &[vec![30.0], vec![80.0]], 3.0);
    let p = BlobLogNdParams {
        min_sigma: Sigma::Scalar(1.0),
        max_sigma: Sigma::Scalar(6.0),
        num_sigma: 6,
        threshold: Some(0.05),
        ..BlobLogNdParams::default()
    };
    let out = blob_log_nd(img.view(), &p).unwrap();
    assert_eq!((out.ndim, out.sigma_columns), (1, 1));
    let mut xs: Vec<f64> = out.rows.iter().map(|r| r[0]).collect();
    xs.sort_by(f64::total_cmp);
    assert_eq!(xs, vec![30.0, 80.0]);
    // σ of the LoG maximum of a Gaussian of σ 3 in 1-D: σ·√2 ≈ 4.2 → the scale 4
    assert!(out.rows.iter().all(|r| r[1] == 4.0), "{:?}", out.rows);
    // per-axis σ of length 1: one σ column per axis (here also 1)
    let p1 = BlobLogNdParams {
        min_sigma: Sigma::PerAxis(vec![1.0]),
        ..p.clone()
    };
    assert_eq!(blob_log_nd(img.view(), &p1).unwrap().rows, out.rows);
}

/// A 3-D volume with per-axis σ: one σ column per axis; a constant volume has no blobs; a
/// border covering the volume leaves none.
#[test]
fn three_dimensional_anisotropic() {
    let img = gauss_image(&[16, 20, 20], &[vec![8.0, 10.0, 9.0]], 2.0);
    let p = BlobLogNdParams {
        min_sigma: Sigma::PerAxis(vec![1.0, 1.0, 1.0]),
        max_sigma: Sigma::PerAxis(vec![3.0, 3.0, 3.0]),
        num_sigma: 5,
        threshold: Some(0.01),
        ..BlobLogNdParams::default()
    };
    let out = blob_log_nd(img.view(), &p).unwrap();
    assert_eq!(out.sigma_columns, 3);
    assert_eq!(out.coords(0), &[8.0, 10.0, 9.0]);
    assert_eq!(out.sigmas(0).len(), 3);
    let flat = ArrayD::<f64>::from_elem(IxDyn(&[6, 7, 8]), 0.5);
    assert!(blob_log_nd(flat.view(), &p).unwrap().rows.is_empty());
    let covered = BlobLogNdParams {
        exclude_border: Border::PerAxis(vec![8, 0, 0]),
        ..p
    };
    assert!(blob_log_nd(img.view(), &covered).unwrap().rows.is_empty());
}

/// NumPy's `linspace` of per-axis arrays: with one zero-step axis, every axis is
/// `i / div · delta + start` (values from NumPy 2.4).
#[test]
fn sigma_table_zero_step_rule() {
    let t = sigma_table::<f32>(&[2.0, 1.3, 1.0], &[6.7, 1.3, 3.1], 7, false);
    assert_eq!(t.len(), 7);
    assert!(t.iter().all(|r| r[1] == 1.3f32));
    assert_eq!(t[6], vec![6.7f32, 1.3, 3.1]);
    let one = sigma_table::<f64>(&[2.0], &[5.0], 1, false);
    assert_eq!(one, vec![vec![2.0]]);
    // the scale factor of an isotropic row is σ²
    assert_eq!(params::scale_factor(&[1.5f64, 1.5, 1.5]), 2.25);
}

/// The outer-axis and last-axis passes equal a direct correlation with SciPy's order.
#[test]
fn passes_equal_direct_correlation() {
    let dims = [5usize, 37, 21];
    let n: usize = dims.iter().product();
    let src: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1009) as f64 / 1009.0)
        .collect();
    let k = LogKernels::new(2.3, false);
    for axis in 0..3 {
        let g = laplace::Geo::of(&dims, axis);
        let mut got = vec![0.0; n];
        if axis == 2 {
            laplace::pass_last(&src, g.len, &k.g2, &mut got, |o, a| *o = a);
        } else {
            laplace::pass_outer::<f64, f64>(&src, &mut got, g, &k.g2);
        }
        let r = k.g2.len() - 1;
        for o in 0..g.outer {
            for i in 0..g.len {
                for c in 0..g.inner {
                    let at = |j: isize| {
                        let m = map_index(i as isize + j, g.len, Boundary::Reflect).unwrap();
                        src[(o * g.len + m) * g.inner + c]
                    };
                    let mut a = at(0) * k.g2[0];
                    for j in (1..=r).rev() {
                        a += (at(-(j as isize)) + at(j as isize)) * k.g2[j];
                    }
                    assert_eq!(got[(o * g.len + i) * g.inner + c], a, "axis {axis}");
                }
            }
        }
    }
}

/// The pairs of the hash grid are the brute-force pairs, in ascending order.
#[test]
fn pairs_nd_are_brute_force_pairs() {
    let mut rng = crate::synth::SplitMix::new(5);
    for (n, ndim, span, cutoff) in [
        (0, 3, 10.0, 2.0),
        (1, 3, 10.0, 2.0),
        (300, 3, 20.0, 4.0),
        (200, 1, 50.0, 3.0),
        (200, 2, 30.0, 0.5),
        (100, 4, 6.0, 2.5),
    ] {
        let pos: Vec<f64> = (0..n * ndim)
            .map(|_| (rng.uniform() * span).floor())
            .collect();
        let mut brute = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                let d2: f64 = (0..ndim)
                    .map(|a| (pos[j * ndim + a] - pos[i * ndim + a]).powi(2))
                    .sum();
                if d2 <= cutoff * cutoff {
                    brute.push((i, j));
                }
            }
        }
        assert_eq!(pairs_within_nd(&pos, ndim, cutoff), brute, "{n} {ndim}");
    }
    assert!(pairs_within_nd(&[0.0, 1.0], 1, f64::NAN).is_empty());
    assert!(pairs_within_nd(&[f64::NAN, 0.0, 0.0, 0.0], 2, 5.0).is_empty());
}

/// Above three dimensions nothing overlaps (scikit-image returns 0).
#[test]
fn no_overlap_above_three_dimensions() {
    let c = [1.0f64, 1.0, 1.0, 1.0];
    assert_eq!(blob_overlap_nd(&c, &[2.0], &c, &[2.0]), Overlap::Py(0.0));
    let keep = prune_blobs_nd(&[c, c].concat(), &[2.0, 2.0], 4, 1, 0.0);
    assert_eq!(keep, vec![true, true]);
    // the same blobs in 3-D: the second (equal σ) removes the first
    let keep = prune_blobs_nd(&[1.0f64, 1.0, 1.0, 1.0, 1.0, 1.0], &[2.0, 2.0], 3, 1, 0.5);
    assert_eq!(keep, vec![false, true]);
}

/// A prescale other than legacy converts the image as the frame path converts a frame: on a
/// 2-D float32 image with one σ, the rows of the frame path (minmax and range in float32).
#[test]
fn prescaled_images_are_converted_as_frames() {
    use crate::detect::blob_log::{BlobLogParams, blob_log_frame};
    let img = gauss_image(&[40, 48], &[vec![12.0, 14.0], vec![27.0, 31.0]], 2.0)
        .mapv(|v| (v * 900.0 + 100.0) as f32);
    let two_d = img.clone().into_dimensionality::<ndarray::Ix2>().unwrap();
    for prescale in [
        Prescale::MinMax,
        Prescale::Range(50.0, 1200.0),
        Prescale::None,
    ] {
        let nd = BlobLogNdParams {
            max_sigma: Sigma::Scalar(4.0),
            threshold: Some(0.02),
            ..Default::default()
        };
        let got = blob_log_nd_prescaled(VolumeView::F32(img.view()), prescale, &nd).unwrap();
        let p = BlobLogParams {
            max_sigma: 4.0,
            threshold: Some(0.02),
            prescale,
            ..Default::default()
        };
        let want: Vec<Vec<f64>> = blob_log_frame(FrameView::F32(two_d.view()), &p)
            .unwrap()
            .iter()
            .map(|b| vec![b.y, b.x, b.sigma])
            .collect();
        assert!(!want.is_empty(), "{prescale:?}");
        assert_eq!(got.rows, want, "{prescale:?}");
    }
}

/// The two peak searches agree (direct comparisons for few voxels above the threshold, box
/// maxima for many): random cubes of small integers (many ties and plateaus) and of reals,
/// 1-D to 4-D, 1 to 4 scales, every threshold from "none" to "few", with and without borders.
#[test]
fn direct_and_box_peak_searches_agree() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let shapes: [&[usize]; 6] = [
        &[17],
        &[5, 7],
        &[4, 6, 5],
        &[3, 4, 3, 5],
        &[1, 9, 2],
        &[2, 2],
    ];
    let mut total = 0;
    for dims in shapes {
        let nvox: usize = dims.iter().product();
        for ns in 1..=4 {
            for ints in [true, false] {
                let cube: Vec<f64> = (0..nvox * ns)
                    .map(|_| {
                        let r = next();
                        if ints {
                            (r % 5) as f64
                        } else {
                            (r >> 11) as f64 / (1u64 << 53) as f64
                        }
                    })
                    .collect();
                for thr in [-1.0, 0.5, 2.0, 3.5, 0.9] {
                    for border in [vec![0; dims.len()], vec![1; dims.len()]] {
                        let key = |c: &peaks::Cand<f64>| (c.idx, c.s, c.v.to_bits());
                        let a: Vec<_> = peaks::direct_peaks(&cube, dims, ns, thr, &border, |v| v)
                            .iter()
                            .map(key)
                            .collect();
                        let b: Vec<_> = peaks::box_peaks(&cube, dims, ns, thr, &border, |v| v)
                            .iter()
                            .map(key)
                            .collect();
                        assert_eq!(a, b, "{dims:?} ns {ns} ints {ints} thr {thr} {border:?}");
                        total += a.len();
                    }
                }
            }
        }
    }
    assert!(total > 100, "{total} peaks in all");
}
