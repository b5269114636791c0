//! The n-D `blob_log` against scikit-image 0.26 (`fixtures/detect/blob_log_nd/`, made by
//! `scripts/fixtures/blob_log_nd.py`), and against the 2-D `blob_log` on the 2-D fixtures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod open;

use algorithms::detect::blob_log::blob_log_frame;
use algorithms::detect::blob_log::nd::{
    BlobLogNdParams, Border, Overlap, Sigma, VolumeView, blob_log_nd_view, blob_overlap_nd,
    log_cube_nd, sigma_table,
};
use common::{Frame, load_csv, load_npy, params};
use ndarray::{ArrayD, IxDyn};

/// A loaded fixture image in its own pixel type.
enum Image {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    U16(ArrayD<u16>),
}

impl Image {
    fn load(name: &str) -> Image {
        let n = load_npy(&format!("blob_log_nd/{name}.npy"));
        let dim = IxDyn(&n.shape);
        match n.descr.as_str() {
            "<f4" => Image::F32(ArrayD::from_shape_vec(dim, n.f32s()).unwrap()),
            "<f8" => Image::F64(ArrayD::from_shape_vec(dim, n.f64s()).unwrap()),
            "<u2" => Image::U16(ArrayD::from_shape_vec(dim, n.u16s()).unwrap()),
            d => panic!("{name}: dtype {d}"),
        }
    }

    fn view(&self) -> VolumeView<'_> {
        match self {
            Image::F32(a) => VolumeView::F32(a.view()),
            Image::F64(a) => VolumeView::F64(a.view()),
            Image::U16(a) => VolumeView::U16(a.view()),
        }
    }

    fn is_f32(&self) -> bool {
        matches!(self, Image::F32(_))
    }
}

/// `1`, `(2 1 1)`: a Python scalar or tuple of the manifest.
fn parse_list(v: &str) -> Option<Vec<f64>> {
    v.strip_prefix('(')?
        .strip_suffix(')')
        .map(|s| s.split_whitespace().map(|x| x.parse().unwrap()).collect())
}

fn parse_sigma(v: &str) -> Sigma {
    parse_list(v).map_or_else(|| Sigma::Scalar(v.parse().unwrap()), Sigma::PerAxis)
}

fn parse_opt(v: &str) -> Option<f64> {
    (v != "None").then(|| v.parse().unwrap())
}

fn parse_border(v: &str) -> Border {
    match v {
        "False" => Border::from_bool(false),
        "True" => Border::from_bool(true),
        _ => match parse_list(v) {
            Some(l) => Border::PerAxis(l.iter().map(|&x| x as usize).collect()),
            None => Border::All(v.parse().unwrap()),
        },
    }
}

/// The parameters of one row of `cases.csv`.
fn case_params(t: &common::Table, r: &[String]) -> BlobLogNdParams {
    let g = |c: &str| r[t.col(c)].as_str();
    BlobLogNdParams {
        min_sigma: parse_sigma(g("min_sigma")),
        max_sigma: parse_sigma(g("max_sigma")),
        num_sigma: g("num_sigma").parse().unwrap(),
        threshold: parse_opt(g("threshold")),
        threshold_rel: parse_opt(g("threshold_rel")),
        overlap: g("overlap").parse().unwrap(),
        log_scale: g("log_scale") == "True",
        exclude_border: parse_border(g("exclude_border")),
    }
}

/// The rows of a fixture CSV (every column, in order).
fn golden_rows(rel: &str) -> Vec<Vec<f64>> {
    load_csv(rel)
        .rows
        .iter()
        .map(|r| r.iter().map(|v| v.parse().unwrap()).collect())
        .collect()
}

/// Every case of the manifest: the same rows as scikit-image, in the same order (for the cases
/// whose result depends on the pruning's pair order, the rows scikit-image gives with the
/// pairs in ascending order, the order used here).
#[test]
fn blob_log_nd_matches_skimage_cases() {
    let t = load_csv("blob_log_nd/cases.csv");
    let mut failures = Vec::new();
    for r in &t.rows {
        let case = &r[t.col("case")];
        let img = Image::load(&r[t.col("image")]);
        let p = case_params(&t, r);
        let got = blob_log_nd_view(img.view(), &p).unwrap();
        let order_free = r[t.col("pair_order_free")] == "1";
        let rel = if order_free {
            format!("blob_log_nd/{case}.csv")
        } else {
            format!("blob_log_nd/{case}__ascending_pairs.csv")
        };
        let want = golden_rows(&rel);
        let ok = got.rows == want;
        eprintln!(
            "{case}: {} rows ({} candidates), skimage {} rows: {}{}",
            got.rows.len(),
            got.candidates,
            want.len(),
            if ok { "identical" } else { "DIFFERENT" },
            if order_free {
                ""
            } else {
                " (ascending-pairs rows)"
            }
        );
        if !ok {
            failures.push(case.clone());
        }
        if !order_free {
            // scikit-image's own (set-ordered) rows: report how far they are
            let set_rows = golden_rows(&format!("blob_log_nd/{case}.csv"));
            let common = set_rows.iter().filter(|x| got.rows.contains(x)).count();
            eprintln!(
                "  with scikit-image's set order: {} rows, {common} in common",
                set_rows.len()
            );
        }
    }
    assert!(
        failures.is_empty(),
        "cases differing from scikit-image: {failures:?}"
    );
}

/// The σ tables equal NumPy's (`linspace` with its `step == 0` rule, `logspace`).
#[test]
fn sigma_tables_match_numpy() {
    let cases = load_csv("blob_log_nd/cases.csv");
    let t = load_csv("blob_log_nd/sigma_tables.csv");
    let mut mismatches = Vec::new();
    for r in &cases.rows {
        let case = &r[cases.col("case")];
        let p = case_params(&cases, r);
        let img = Image::load(&r[cases.col("image")]);
        let ndim = match &img {
            Image::F32(a) => a.ndim(),
            Image::F64(a) => a.ndim(),
            Image::U16(a) => a.ndim(),
        };
        let axes = |s: &Sigma| match s {
            Sigma::Scalar(v) => vec![*v; ndim],
            Sigma::PerAxis(v) => v.clone(),
        };
        let (lo, hi) = (axes(&p.min_sigma), axes(&p.max_sigma));
        let table: Vec<Vec<f64>> = if img.is_f32() {
            sigma_table::<f32>(&lo, &hi, p.num_sigma, p.log_scale)
                .iter()
                .map(|row| row.iter().map(|&v| f64::from(v)).collect())
                .collect()
        } else {
            sigma_table::<f64>(&lo, &hi, p.num_sigma, p.log_scale)
        };
        for g in t.rows.iter().filter(|g| &g[t.col("case")] == case) {
            let i: usize = g[t.col("scale_index")].parse().unwrap();
            let a: usize = g[t.col("axis")].parse().unwrap();
            let want: f64 = g[t.col("sigma")].parse().unwrap();
            if table[i][a] != want {
                mismatches.push(format!("{case} [{i}][{a}]: {} vs {want}", table[i][a]));
            }
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

/// The scale-space cubes of the small anisotropic volume (f32 and f64) against the ones
/// scikit-image passed to `peak_local_max` (axes `(z, y, x, scale)`).
#[test]
fn cubes_match_skimage() {
    for name in ["small_f32", "small_f64"] {
        let img = Image::load(name);
        let want = load_npy(&format!("blob_log_nd/{name}__aniso__cube.npy"));
        let ns = want.shape[3];
        let (lo, hi) = (vec![1.5, 1.0, 1.0], vec![3.0, 2.0, 2.0]);
        let (cube, golden): (Vec<f64>, Vec<f64>) = match &img {
            Image::F32(a) => (
                log_cube_nd(a.view(), &lo, &hi, ns, false)
                    .unwrap()
                    .into_iter()
                    .map(f64::from)
                    .collect(),
                want.f32s().into_iter().map(f64::from).collect(),
            ),
            Image::F64(a) => (
                log_cube_nd(a.view(), &lo, &hi, ns, false).unwrap(),
                want.f64s(),
            ),
            Image::U16(_) => unreachable!(),
        };
        let nvox = golden.len() / ns;
        let gmax = golden.iter().fold(0f64, |m, v| m.max(v.abs()));
        let (mut exact, mut maxerr) = (0usize, 0f64);
        for k in 0..nvox {
            for s in 0..ns {
                let (a, b) = (cube[s * nvox + k], golden[k * ns + s]);
                exact += usize::from(a == b);
                maxerr = maxerr.max((a - b).abs());
            }
        }
        eprintln!(
            "{name}: cube bit-exact {exact}/{}, max abs err {maxerr:e} (max |cube| {gmax})",
            nvox * ns
        );
        let tol = if img.is_f32() { 1e-6 } else { 1e-14 };
        assert!(maxerr <= tol * gmax, "{name}");
    }
}

/// `_blob_overlap` on random pairs (1-D to 3-D, one or per-axis σ, float32 and float64): the
/// same value, of the same kind (Python float or NumPy scalar).
#[test]
fn overlaps_match_skimage() {
    let t = load_csv("blob_log_nd/overlaps.csv");
    let mut bad = Vec::new();
    for r in &t.rows {
        let g = |c: &str| r[t.col(c)].as_str();
        let ndim: usize = g("ndim").parse().unwrap();
        let b1: Vec<f64> = g("blob1").split(' ').map(|v| v.parse().unwrap()).collect();
        let b2: Vec<f64> = g("blob2").split(' ').map(|v| v.parse().unwrap()).collect();
        let want: f64 = g("overlap").parse().unwrap();
        let sd = b1.len() - ndim;
        let (value, py) = if g("dtype") == "float32" {
            let c = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
            let (b1, b2) = (c(&b1), c(&b2));
            match blob_overlap_nd(&b1[..ndim], &b1[ndim..], &b2[..ndim], &b2[ndim..]) {
                Overlap::Py(v) => (v, true),
                Overlap::Typed(v) => (f64::from(v), false),
            }
        } else {
            match blob_overlap_nd(&b1[..ndim], &b1[ndim..], &b2[..ndim], &b2[ndim..]) {
                Overlap::Py(v) => (v, true),
                Overlap::Typed(v) => (v, false),
            }
        };
        assert_eq!(sd.to_string(), g("sigma_dim"));
        if value != want || py != (g("kind") == "py") {
            bad.push(format!("{r:?}: got {value} (py {py})"));
        }
    }
    eprintln!("{} overlaps, {} different", t.rows.len(), bad.len());
    assert!(bad.is_empty(), "{bad:#?}");
}

/// On 2-D frames with scalar σ, the n-D code gives the 2-D `blob_log`'s rows (its fixture
/// frames and parameter sets).
#[test]
fn two_d_equals_blob_log_frame() {
    for f in ["hisnr_f32", "lowsnr_f32", "hisnr_u16", "overlap_f32"] {
        let frame = Frame::load(f);
        for set in [
            "default_rel",
            "abs",
            "logscale",
            "border5",
            "overlap0",
            "overlap1",
        ] {
            let p2 = params(f, set);
            let p = BlobLogNdParams {
                min_sigma: Sigma::Scalar(p2.min_sigma),
                max_sigma: Sigma::Scalar(p2.max_sigma),
                num_sigma: p2.num_sigma,
                threshold: p2.threshold,
                threshold_rel: p2.threshold_rel,
                overlap: p2.overlap,
                log_scale: p2.log_scale,
                exclude_border: Border::PerAxis(vec![p2.exclude_border.0, p2.exclude_border.1]),
            };
            let want: Vec<Vec<f64>> = blob_log_frame(frame.view(), &p2)
                .unwrap()
                .iter()
                .map(|b| vec![b.y, b.x, b.sigma])
                .collect();
            let got = match &frame {
                Frame::F32(a) => blob_log_nd_view(VolumeView::F32(a.view().into_dyn()), &p),
                Frame::U16(a) => blob_log_nd_view(VolumeView::U16(a.view().into_dyn()), &p),
                Frame::F64(a) => blob_log_nd_view(VolumeView::F64(a.view().into_dyn()), &p),
                Frame::U8(a) => blob_log_nd_view(VolumeView::U8(a.view().into_dyn()), &p),
            }
            .unwrap();
            eprintln!(
                "{f} {set}: {} rows, 2-D {} rows",
                got.rows.len(),
                want.len()
            );
            assert_eq!(got.rows, want, "{f} {set}");
        }
    }
}

/// Speed: a 64×256×256 float32 volume with 10 scales (run with `--ignored --nocapture`, in
/// release).
#[test]
#[ignore = "timing; run in release"]
fn timing_64x256x256_f32() {
    let dims = [64usize, 256, 256];
    let n: usize = dims.iter().product();
    let mut rng = 1u64;
    let data: Vec<f32> = (0..n)
        .map(|i| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let z = (i / 65536) as f32;
            let y = ((i / 256) % 256) as f32;
            let x = (i % 256) as f32;
            let b = (-((z - 30.0).powi(2) + (y - 100.0).powi(2) + (x - 60.0).powi(2)) / 18.0).exp();
            b + (rng >> 40) as f32 / (1u64 << 24) as f32 * 0.02
        })
        .collect();
    let a = ArrayD::from_shape_vec(IxDyn(&dims), data).unwrap();
    for (lo, hi) in [(1.0, 10.0), (1.0, 50.0)] {
        let p = BlobLogNdParams {
            min_sigma: Sigma::Scalar(lo),
            max_sigma: Sigma::Scalar(hi),
            threshold: Some(0.05),
            ..BlobLogNdParams::default()
        };
        let t0 = std::time::Instant::now();
        let out = blob_log_nd_view(VolumeView::F32(a.view()), &p).unwrap();
        eprintln!(
            "64x256x256 f32, sigma {lo}..{hi}, 10 scales: {:.2} s, {} blobs ({} candidates), {} threads",
            t0.elapsed().as_secs_f64(),
            out.rows.len(),
            out.candidates,
            rayon::current_num_threads()
        );
    }
}

/// Volumes of every pixel type, 1-D to 4-D, with scalar and per-axis σ, random but real-like
/// (Gaussian spots on noise), and the parameters they run with.
fn device_cases() -> Vec<(String, Image, BlobLogNdParams)> {
    let mut rng = 7u64;
    let mut uniform = move || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::new();
    let shapes: [&[usize]; 5] = [&[9, 23, 31], &[40], &[17, 29], &[5, 6, 11, 13], &[1, 12, 1]];
    for (k, &shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let spots: Vec<(Vec<f64>, f64)> = (0..(n / 300).max(2))
            .map(|_| {
                (
                    shape.iter().map(|&d| uniform() * d as f64).collect(),
                    uniform(),
                )
            })
            .collect();
        let vals: Vec<f64> = (0..n)
            .map(|i| {
                let mut rem = i;
                let mut idx = vec![0f64; shape.len()];
                for (a, &d) in shape.iter().enumerate().rev() {
                    idx[a] = (rem % d) as f64;
                    rem /= d;
                }
                let b: f64 = spots
                    .iter()
                    .map(|(c, a)| {
                        let d2: f64 = c.iter().zip(&idx).map(|(c, x)| (c - x).powi(2)).sum();
                        (0.3 + 0.6 * a) * (-d2 / 4.5).exp()
                    })
                    .sum();
                0.1 + 0.05 * uniform() + b
            })
            .collect();
        let max = vals.iter().fold(0f64, |m, &v| m.max(v));
        let dim = IxDyn(shape);
        let per_axis: Vec<f64> = (0..shape.len()).map(|a| 1.0 + 0.5 * a as f64).collect();
        let params = [
            BlobLogNdParams {
                min_sigma: Sigma::Scalar(1.0),
                max_sigma: Sigma::Scalar(3.0),
                num_sigma: 5,
                threshold: None,
                threshold_rel: Some(0.2),
                ..BlobLogNdParams::default()
            },
            BlobLogNdParams {
                min_sigma: Sigma::PerAxis(per_axis.clone()),
                max_sigma: Sigma::PerAxis(per_axis.iter().map(|s| 2.0 * s).collect()),
                num_sigma: 4,
                threshold: Some(0.01),
                log_scale: k % 2 == 1,
                exclude_border: Border::All(1),
                ..BlobLogNdParams::default()
            },
        ];
        let images = [
            Image::F64(ArrayD::from_shape_vec(dim.clone(), vals.clone()).unwrap()),
            Image::F32(
                ArrayD::from_shape_vec(dim.clone(), vals.iter().map(|&v| v as f32).collect())
                    .unwrap(),
            ),
            Image::U16(
                ArrayD::from_shape_vec(
                    dim,
                    vals.iter().map(|&v| (v / max * 60000.0) as u16).collect(),
                )
                .unwrap(),
            ),
        ];
        for img in images {
            for (j, p) in params.iter().enumerate() {
                let dtype = match img {
                    Image::F64(_) => "f64",
                    Image::F32(_) => "f32",
                    Image::U16(_) => "u16",
                };
                let img = match &img {
                    Image::F64(a) => Image::F64(a.clone()),
                    Image::F32(a) => Image::F32(a.clone()),
                    Image::U16(a) => Image::U16(a.clone()),
                };
                out.push((format!("{shape:?} {dtype} params {j}"), img, p.clone()));
            }
        }
    }
    out
}

/// The n-D `blob_log` on `device` gives the CPU's rows, threshold and candidate count on every
/// case of the fixture manifest and on [`device_cases`] (the cube is the CPU's bit for bit:
/// the threshold comes from its extrema, the candidates from every value).
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn device_equals_the_cpu(device: bridge_core::Device) {
    use algorithms::detect::Prescale;
    use algorithms::detect::blob_log::nd::blob_log_nd_on_device;
    let var = test_support::require::var_for(device).unwrap();
    let Some(dev) = test_support::or_skip(var, &device.to_string(), open::try_open(device)) else {
        return;
    };
    let t = load_csv("blob_log_nd/cases.csv");
    let mut cases: Vec<(String, Image, BlobLogNdParams)> = t
        .rows
        .iter()
        .map(|r| {
            (
                r[t.col("case")].clone(),
                Image::load(&r[t.col("image")]),
                case_params(&t, r),
            )
        })
        .collect();
    cases.extend(device_cases());
    let mut rows = 0;
    for (name, img, p) in &cases {
        let cpu = blob_log_nd_view(img.view(), p).unwrap();
        let got = blob_log_nd_on_device(&dev, img.view(), Prescale::Legacy, p).unwrap();
        assert_eq!(got, cpu, "{device} {name}");
        rows += cpu.rows.len();
    }
    eprintln!(
        "{device}: {} volumes, {rows} rows, all the CPU's",
        cases.len()
    );
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
