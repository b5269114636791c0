//! The n-D trackpy `locate` (3-D volumes, a diameter per axis) against trackpy 0.7's tables
//! (fixtures/detect/locate_nd/, made by scripts/fixtures/locate_nd.py, whose CASES these
//! repeat), and against the 2-D path where both apply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[cfg(any(feature = "opencl", feature = "cuda"))]
mod open;

use algorithms::detect::FrameView;
use algorithms::detect::blob_log::VolumeView;
use algorithms::detect::locate::{LocateNdParams, LocateParams, locate, locate_nd};
use common::{load_csv, load_npy};
use ndarray::{ArrayView2, ArrayViewD, IxDyn};

/// The pixels of a fixture image, owned.
enum Pixels {
    U8(Vec<u8>),
    U16(Vec<u16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

fn load(name: &str) -> (Vec<usize>, Pixels) {
    let n = load_npy(&format!("locate_nd/{name}.npy"));
    let px = match n.descr.as_str() {
        "|u1" => Pixels::U8(n.data.clone()),
        "<u2" => Pixels::U16(n.u16s()),
        "<f4" => Pixels::F32(n.f32s()),
        "<f8" => Pixels::F64(n.f64s()),
        d => panic!("{name}: dtype {d}"),
    };
    (n.shape.clone(), px)
}

fn view<'a>(shape: &[usize], px: &'a Pixels) -> VolumeView<'a> {
    let s = IxDyn(shape);
    match px {
        Pixels::U8(v) => VolumeView::U8(ArrayViewD::from_shape(s, v).unwrap()),
        Pixels::U16(v) => VolumeView::U16(ArrayViewD::from_shape(s, v).unwrap()),
        Pixels::F32(v) => VolumeView::F32(ArrayViewD::from_shape(s, v).unwrap()),
        Pixels::F64(v) => VolumeView::F64(ArrayViewD::from_shape(s, v).unwrap()),
    }
}

/// `locate_nd` of fixture `image` under `p` against trackpy's table `case`: the same columns,
/// rows in the same order, every value within 1e-10 (relative past magnitude 1), NaN where
/// trackpy has NaN.
fn check(case: &str, image: &str, p: &LocateNdParams) {
    let (shape, px) = load(image);
    let got = locate_nd(view(&shape, &px), p).unwrap();
    let want = load_csv(&format!("locate_nd/{case}.csv"));
    assert_eq!(got.columns, want.header, "{case}: columns");
    assert_eq!(got.rows.len(), want.rows.len(), "{case}: feature count");
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.rows.iter().zip(&want.rows).enumerate() {
        for (k, (gv, ws)) in g.iter().zip(w).enumerate() {
            let wv: f64 = if ws.is_empty() {
                f64::NAN
            } else {
                ws.parse().unwrap()
            };
            if wv.is_nan() {
                assert!(
                    gv.is_nan(),
                    "{case}: row {i} {}: {gv} vs NaN",
                    got.columns[k]
                );
                continue;
            }
            let err = (gv - wv).abs() / wv.abs().max(1.0);
            worst = worst.max(err);
            assert!(
                err <= 1e-10,
                "{case}: row {i} {}: {gv} vs {wv} (rel {err:e})",
                got.columns[k]
            );
        }
    }
    eprintln!(
        "{case}: {} features, worst rel err {worst:e}",
        got.rows.len()
    );
}

fn params(d: &[usize]) -> LocateNdParams {
    LocateNdParams::new(d.to_vec())
}

#[test]
fn volume_isotropic_u16_u8() {
    check("vol_u16_d5", "vol_u16", &params(&[5]));
    check(
        "vol_u16_d7_mm",
        "vol_u16",
        &LocateNdParams {
            minmass: 2000.0,
            ..params(&[7])
        },
    );
    check("vol_u8_d5", "vol_u8", &params(&[5]));
}

#[test]
fn volume_isotropic_float() {
    check("vol_f64_d5", "vol_f64", &params(&[5]));
    check("vol_f32_d5", "vol_f32", &params(&[5]));
}

#[test]
fn volume_options() {
    check(
        "vol_u16_d5_nochar",
        "vol_u16",
        &LocateNdParams {
            characterize: false,
            ..params(&[5])
        },
    );
    check(
        "vol_u16_d5_top5",
        "vol_u16",
        &LocateNdParams {
            topn: Some(5),
            ..params(&[5])
        },
    );
    check(
        "vol_u16_d5_top1",
        "vol_u16",
        &LocateNdParams {
            topn: Some(1),
            maxsize: Some(1.6),
            ..params(&[5])
        },
    );
    check(
        "vol_u16_d5_inv",
        "vol_u16",
        &LocateNdParams {
            invert: true,
            ..params(&[5])
        },
    );
    check(
        "vol_u16_d5_sep",
        "vol_u16",
        &LocateNdParams {
            separation: Some(vec![3.0, 6.0, 6.0]),
            noise_size: vec![1.0, 1.5, 1.5],
            ..params(&[5])
        },
    );
}

#[test]
fn volume_anisotropic() {
    check("aniso_u16_d955", "aniso_u16", &params(&[9, 5, 5]));
    check(
        "aniso_f64_d755",
        "aniso_f64",
        &LocateNdParams {
            smoothing_size: Some(vec![9, 7, 9]),
            threshold: Some(0.001),
            ..params(&[7, 5, 5])
        },
    );
    check(
        "aniso_u16_d755_pp",
        "aniso_u16",
        &LocateNdParams {
            preprocess: false,
            ..params(&[7, 5, 5])
        },
    );
}

#[test]
fn image_anisotropic() {
    check("img2_u16_d75", "img2_u16", &params(&[7, 5]));
    check("img2_f32_d75", "img2_f32", &params(&[7, 5]));
    check(
        "img2_u8_d75",
        "img2_u8",
        &LocateNdParams {
            separation: Some(vec![5.0, 4.0]),
            ..params(&[7, 5])
        },
    );
    check(
        "img2_u16_d77_ns",
        "img2_u16",
        &LocateNdParams {
            noise_size: vec![1.5, 1.0],
            ..params(&[7, 7])
        },
    );
}

/// On a 2-D image with one diameter, the n-D path finds the 2-D path's features.
#[test]
fn nd_agrees_with_2d_path() {
    let (shape, px) = load("img2_u16");
    let Pixels::U16(v) = &px else { panic!() };
    let frame = ArrayView2::from_shape((shape[0], shape[1]), v).unwrap();
    let flat = locate(FrameView::U16(frame), &LocateParams::new(7)).unwrap();
    let nd = locate_nd(view(&shape, &px), &params(&[7, 7])).unwrap();
    assert_eq!(
        nd.columns,
        ["y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep"]
    );
    assert_eq!(flat.len(), nd.rows.len());
    for (f, r) in flat.iter().zip(&nd.rows) {
        let vals = [f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep];
        for (a, b) in vals.iter().zip(r) {
            assert!((a - b).abs() <= 1e-9 * a.abs().max(1.0), "{a} vs {b}");
        }
    }
}

/// Bad settings are typed errors, never panics.
#[test]
fn invalid_settings() {
    let (shape, px) = load("vol_u16");
    let v = view(&shape, &px);
    let bad = [
        params(&[4]),
        params(&[5, 5]),
        params(&[0]),
        LocateNdParams {
            separation: Some(vec![1.0, 2.0]),
            ..params(&[5])
        },
        LocateNdParams {
            smoothing_size: Some(vec![6]),
            ..params(&[5])
        },
        LocateNdParams {
            noise_size: vec![9.0],
            ..params(&[5])
        },
        LocateNdParams {
            maxsize: Some(2.0),
            ..params(&[7, 5, 5])
        },
        LocateNdParams {
            percentile: 101.0,
            ..params(&[5])
        },
    ];
    for p in &bad {
        let e = locate_nd(v.clone(), p).unwrap_err();
        assert!(
            matches!(
                e,
                bridge_core::BridgeError::InvalidInput(_)
                    | bridge_core::BridgeError::InvalidArgument { .. }
            ),
            "{p:?}: {e}"
        );
    }
    let four = vec![0u16; 2 * 8 * 8 * 8];
    let v4 = VolumeView::U16(ArrayViewD::from_shape(IxDyn(&[2, 8, 8, 8]), &four).unwrap());
    assert!(locate_nd(v4, &params(&[3])).is_err());
    let nan = vec![f64::NAN; 8 * 8 * 8];
    let vn = VolumeView::F64(ArrayViewD::from_shape(IxDyn(&[8, 8, 8]), &nan).unwrap());
    assert!(locate_nd(vn, &params(&[3])).is_err());
}

/// Why a volume gives no feature, for trackpy's warnings: a black volume, maxima only in the
/// margin, features below `minmass`; a volume with features has no reason.
#[test]
fn why_a_volume_is_empty() {
    use algorithms::detect::Empty;
    use algorithms::detect::locate::why_empty_nd;
    let shape = [15usize, 17, 19];
    let why = |px: &Vec<u8>, p: &LocateNdParams| {
        why_empty_nd(
            VolumeView::U8(ArrayViewD::from_shape(IxDyn(&shape), px).unwrap()),
            p,
        )
        .unwrap()
    };
    let black = vec![0u8; 15 * 17 * 19];
    assert_eq!(why(&black, &params(&[5])), Some(Empty::Black));
    // a bright voxel one voxel from the corner (a maximum, but in the margin) and a dim one in
    // the middle (below the percentile threshold)
    let mut corner = black.clone();
    corner[17 * 19 + 19 + 1] = 200;
    corner[7 * 17 * 19 + 8 * 19 + 9] = 50;
    let raw = LocateNdParams {
        preprocess: false,
        ..params(&[5])
    };
    assert_eq!(why(&corner, &raw), Some(Empty::InMargins));
    // a blob in the middle: found; unless minmass asks for more than it has
    let mut blob = black.clone();
    for (k, v) in blob.iter_mut().enumerate() {
        let (z, y, x) = (k / (17 * 19), (k / 19) % 17, k % 19);
        let d2 = (z as f64 - 7.0).powi(2) + (y as f64 - 8.0).powi(2) + (x as f64 - 9.0).powi(2);
        *v = (10.0 + 200.0 * (-d2 / 3.0).exp()) as u8;
    }
    assert_eq!(why(&blob, &params(&[5])), None);
    let heavy = LocateNdParams {
        minmass: 1e9,
        ..params(&[5])
    };
    assert_eq!(why(&blob, &heavy), Some(Empty::Filtered));
}

/// The fixture images and parameter sets of the tests above, and random real-like volumes and
/// images (Gaussian spots on noise) of every pixel type under varied settings: the inputs the
/// device path must match the CPU on.
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn device_cases() -> Vec<(String, Vec<usize>, Pixels, LocateNdParams)> {
    let mut out = Vec::new();
    let fixtures: Vec<(&str, LocateNdParams)> = vec![
        ("vol_u16", params(&[5])),
        (
            "vol_u16",
            LocateNdParams {
                invert: true,
                ..params(&[7])
            },
        ),
        ("vol_u8", params(&[5])),
        ("vol_f64", params(&[5])),
        ("vol_f32", params(&[5])),
        ("aniso_u16", params(&[9, 5, 5])),
        (
            "aniso_f64",
            LocateNdParams {
                smoothing_size: Some(vec![9, 7, 9]),
                threshold: Some(0.001),
                ..params(&[7, 5, 5])
            },
        ),
        (
            "aniso_u16",
            LocateNdParams {
                preprocess: false,
                ..params(&[7, 5, 5])
            },
        ),
        ("img2_u16", params(&[7, 5])),
        ("img2_f32", params(&[7, 5])),
        (
            "img2_u16",
            LocateNdParams {
                noise_size: vec![1.5, 1.0],
                ..params(&[7, 7])
            },
        ),
    ];
    for (image, p) in fixtures {
        let (shape, px) = load(image);
        out.push((format!("fixture {image}"), shape, px, p));
    }
    let mut rng = test_support::spots::Rng(0x5eed_1234_abcd_9876);
    let shapes: [&[usize]; 3] = [&[14, 40, 36], &[50, 61], &[9, 33, 17]];
    for (k, &shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let vals = test_support::spots::Spots {
            count: (n / 400).max(3),
            amplitude: (0.8, 0.8),
            width2: 3.0,
            floor: 0.05,
            noise: 0.1,
        }
        .image(shape, &mut rng);
        let top = vals.iter().fold(0f64, |m, &v| m.max(v));
        let vals: Vec<f64> = vals.iter().map(|v| v / top).collect();
        let d = if shape.len() == 3 {
            vec![5, 5, 5]
        } else {
            vec![7, 5]
        };
        let nd = shape.len();
        // the boxcar only along the last axis, or along every axis but the last; no lowpass
        // along the first axis
        let mut last_only = vec![1; nd];
        last_only[nd - 1] = 9;
        let mut not_last = vec![9; nd];
        not_last[nd - 1] = 1;
        // (trackpy wants the boxcar wider than the lowpass on every axis)
        let mut no_first = vec![0.5; nd];
        no_first[0] = 0.0;
        let mut thin_last = vec![1.0; nd];
        thin_last[nd - 1] = 0.5;
        let sets = [
            params(&d),
            LocateNdParams {
                invert: k == 1,
                smoothing_size: Some(vec![9; nd]),
                noise_size: (0..nd).map(|a| 1.0 + 0.25 * a as f64).collect(),
                ..params(&d)
            },
            LocateNdParams {
                smoothing_size: Some(last_only),
                noise_size: no_first,
                ..params(&d)
            },
            LocateNdParams {
                smoothing_size: Some(not_last),
                noise_size: thin_last,
                ..params(&d)
            },
        ];
        let pixels = [
            Pixels::U8(vals.iter().map(|&v| (v * 250.0) as u8).collect()),
            Pixels::U16(vals.iter().map(|&v| (v * 60000.0) as u16).collect()),
            Pixels::F32(vals.iter().map(|&v| v as f32).collect()),
            Pixels::F64(vals.clone()),
        ];
        for px in pixels {
            for (j, p) in sets.iter().enumerate() {
                let px = match &px {
                    Pixels::U8(v) => Pixels::U8(v.clone()),
                    Pixels::U16(v) => Pixels::U16(v.clone()),
                    Pixels::F32(v) => Pixels::F32(v.clone()),
                    Pixels::F64(v) => Pixels::F64(v.clone()),
                };
                out.push((
                    format!("random {shape:?} set {j}"),
                    shape.to_vec(),
                    px,
                    p.clone(),
                ));
            }
        }
    }
    out
}

/// `locate_nd` with its preprocessing on `device` gives the CPU's features bit for bit (NaN
/// where the CPU has NaN) on [`device_cases`].
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn device_equals_the_cpu(device: bridge_core::Device) {
    use algorithms::detect::locate::locate_nd_on_device;
    let var = test_support::require::var_for(device).unwrap();
    let Some(dev) = test_support::or_skip(var, &device.to_string(), open::try_open(device)) else {
        return;
    };
    let (mut cases, mut rows) = (0, 0);
    for (name, shape, px, p) in device_cases() {
        let cpu = locate_nd(view(&shape, &px), &p).unwrap();
        let got = locate_nd_on_device(&dev, view(&shape, &px), &p).unwrap();
        assert_eq!(got.columns, cpu.columns, "{device} {name}");
        let bits = |r: &Vec<Vec<f64>>| -> Vec<Vec<u64>> {
            r.iter()
                .map(|row| row.iter().map(|v| v.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(&got.rows), bits(&cpu.rows), "{device} {name}");
        cases += 1;
        rows += cpu.rows.len();
    }
    eprintln!("{device}: {cases} images, {rows} features, all the CPU's");
    assert!(rows > 100, "{rows} features in all");
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_volumes_equal_the_cpu() {
    device_equals_the_cpu(bridge_core::Device::OpenCl(0));
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_volumes_equal_the_cpu() {
    device_equals_the_cpu(bridge_core::Device::Cuda(0));
}
