#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Device `blob_log` (`detect::gpu`) against the fixtures and the CPU implementation.
//!
//! * OpenCL (PoCL in CI): skipped without an OpenCL device unless `ARRAYBRIDGE_REQUIRE_OPENCL=1`.
//! * CUDA: skipped without a GPU unless `ARRAYBRIDGE_REQUIRE_GPU=1`.
//! * NVRTC compile check of every source in `detect::kernels::ALL`: skipped without libnvrtc
//!   unless `ARRAYBRIDGE_REQUIRE_NVRTC=1` (`eval "$(bash scripts/nvrtc.sh --print-env)"`).
//!
//! Run: `cargo test -p algorithms --features opencl,cuda --test detect_gpu -- --nocapture`.
#![cfg(any(feature = "opencl", feature = "cuda"))]

mod common;

mod open;

use algorithms::Precision;
use algorithms::detect::blob_log::{Blob, BlobLogParams, blob_log_diag, log_cube, sigma_list};
use algorithms::detect::gpu::GpuDetectConfig;
use algorithms::detect::{DetectBackend, FrameView, Prescale, blob_log_frame};
use common::{Frame, load_csv, load_npy, params};
use ndarray::Array2;
use test_support::env_flag;

// ------------------------------------------------------------------------------------------
// inputs

const FRAMES: [&str; 4] = ["hisnr_f32", "lowsnr_f32", "hisnr_u16", "overlap_f32"];
const SETS: [&str; 6] = [
    "default_rel",
    "abs",
    "logscale",
    "border5",
    "overlap0",
    "overlap1",
];

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Gaussian spots on a noisy background, values in about [0, 1].
fn spots(h: usize, w: usize, n: usize, seed: u64) -> Array2<f64> {
    let mut r = Rng(seed);
    let mut img = Array2::from_shape_fn((h, w), |_| 0.1 + 0.05 * r.uniform());
    for _ in 0..n {
        let (y0, x0) = (r.uniform() * h as f64, r.uniform() * w as f64);
        let s = 1.0 + 2.0 * r.uniform();
        let a = 0.3 + 0.6 * r.uniform();
        for ((y, x), v) in img.indexed_iter_mut() {
            let d2 = (y as f64 - y0).powi(2) + (x as f64 - x0).powi(2);
            *v += a * (-d2 / (2.0 * s * s)).exp();
        }
    }
    img
}

/// `img` as an f64, an f32, a u16 (scaled to 60000 at its maximum) and a u8 frame (250).
fn every_dtype(img: &Array2<f64>) -> [Frame; 4] {
    let max = img.iter().fold(0.0f64, |m, v| m.max(*v));
    [
        Frame::F64(img.clone()),
        Frame::F32(img.mapv(|v| v as f32)),
        Frame::U16(img.mapv(|v| (v / max * 60000.0).round() as u16)),
        Frame::U8(img.mapv(|v| (v / max * 250.0).round() as u8)),
    ]
}

fn random_frames(seed: u64) -> Vec<(String, Frame)> {
    let mut out = Vec::new();
    for (k, &(h, w)) in [(64usize, 48usize), (37, 91), (5, 7), (1, 12), (128, 128)]
        .iter()
        .enumerate()
    {
        let s = seed + k as u64 * 101;
        let img = spots(h, w, (h * w / 150).max(2), s);
        let max = img.iter().fold(0.0f64, |m, v| m.max(*v));
        out.push((format!("{h}x{w} f32"), Frame::F32(img.mapv(|v| v as f32))));
        out.push((format!("{h}x{w} f64"), Frame::F64(img.clone())));
        out.push((
            format!("{h}x{w} u16"),
            Frame::U16(img.mapv(|v| (v / max * 60000.0).round() as u16)),
        ));
        out.push((
            format!("{h}x{w} u8"),
            Frame::U8(img.mapv(|v| (v / max * 250.0).round() as u8)),
        ));
    }
    // white noise: thousands of candidates (grows the candidate buffer), chained prunes
    let mut r = Rng(seed ^ 0xABCD);
    let noise = Array2::from_shape_fn((64, 64), |_| r.uniform());
    out.push(("noise f32".into(), Frame::F32(noise.mapv(|v| v as f32))));
    out.push(("noise f64".into(), Frame::F64(noise)));
    // a flat frame with one spot: the flat area is a plateau of equal cube values, every voxel
    // of which is a maximum (thousands of candidates: the candidate buffer must grow)
    let mut flat = Array2::from_elem((64, 64), 0.0f32);
    flat[[10, 12]] = 1.0;
    out.push(("plateau f32".into(), Frame::F32(flat)));
    // a constant frame: constant cube, no peak
    out.push((
        "const f32".into(),
        Frame::F32(Array2::from_elem((16, 16), 0.5f32)),
    ));
    out
}

fn random_params() -> Vec<(&'static str, BlobLogParams)> {
    let base = BlobLogParams {
        min_sigma: 1.0,
        max_sigma: 3.0,
        num_sigma: 10,
        threshold: None,
        threshold_rel: Some(0.2),
        ..BlobLogParams::default()
    };
    vec![
        ("default_rel", base.clone()),
        (
            "abs0.02",
            BlobLogParams {
                threshold: Some(0.02),
                threshold_rel: None,
                ..base.clone()
            },
        ),
        (
            "minmax_border",
            BlobLogParams {
                prescale: Prescale::MinMax,
                threshold: Some(0.05),
                threshold_rel: None,
                exclude_border: (3, 2),
                ..base.clone()
            },
        ),
        (
            "log_1_6_5_overlap0",
            BlobLogParams {
                max_sigma: 6.0,
                num_sigma: 5,
                log_scale: true,
                overlap: 0.0,
                ..base.clone()
            },
        ),
        (
            "range",
            BlobLogParams {
                prescale: Prescale::Range(-5.0, 70000.0),
                ..base.clone()
            },
        ),
        (
            "none",
            BlobLogParams {
                prescale: Prescale::None,
                ..base.clone()
            },
        ),
        (
            "all_maxima",
            BlobLogParams {
                threshold: Some(-1.0e3),
                threshold_rel: None,
                ..base.clone()
            },
        ),
        (
            // the larger of the two thresholds, per frame (on the device)
            "abs_and_rel",
            BlobLogParams {
                threshold: Some(0.01),
                threshold_rel: Some(0.3),
                ..base.clone()
            },
        ),
        (
            // no threshold at all: every maximum above the cube's minimum
            "no_threshold",
            BlobLogParams {
                threshold: None,
                threshold_rel: None,
                ..base.clone()
            },
        ),
        (
            "one_scale",
            BlobLogParams {
                min_sigma: 2.0,
                max_sigma: 2.0,
                num_sigma: 1,
                ..base
            },
        ),
    ]
}

// ------------------------------------------------------------------------------------------
// comparison helpers

/// Number of rows that differ between two blob lists (position, σ, scale, order, and the
/// response exactly; with `loose`, the response within 1e-5 of the largest response, for a
/// float32 device cube against the CPU's float64 one).
fn diff_rows(a: &[Blob], b: &[Blob], loose: bool) -> usize {
    let rmax = b.iter().fold(0.0f64, |m, v| m.max(v.response.abs()));
    let common = a
        .iter()
        .zip(b)
        .filter(|(x, y)| {
            let resp = if loose {
                (x.response - y.response).abs() > 1e-5 * rmax
            } else {
                x.response != y.response
            };
            x.y != y.y || x.x != y.x || x.sigma != y.sigma || x.scale_index != y.scale_index || resp
        })
        .count();
    common + a.len().abs_diff(b.len())
}

/// Set difference on (y, x, scale_index), ignoring order and response.
fn set_diff(a: &[Blob], b: &[Blob]) -> usize {
    use std::collections::BTreeSet;
    let k = |v: &[Blob]| -> BTreeSet<(i64, i64, usize)> {
        v.iter()
            .map(|b| (b.y as i64, b.x as i64, b.scale_index))
            .collect()
    };
    k(a).symmetric_difference(&k(b)).count()
}

fn max_rel_err(a: &[f64], golden: &[f64]) -> f64 {
    assert_eq!(a.len(), golden.len());
    let scale = golden.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter()
        .zip(golden)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
        / scale
}

/// Device cube `[s][y][x]` (full frame `h × w`) cut to the fixture tile `[y][x][s]`.
fn tile(
    cube: &[f64],
    (h, w, ns): (usize, usize, usize),
    (r0, c0): (usize, usize),
    (th, tw): (usize, usize),
) -> Vec<f64> {
    assert_eq!(cube.len(), ns * h * w);
    let mut out = Vec::with_capacity(th * tw * ns);
    for y in r0..r0 + th {
        for x in c0..c0 + tw {
            for s in 0..ns {
                out.push(cube[s * h * w + y * w + x]);
            }
        }
    }
    out
}

// ------------------------------------------------------------------------------------------
// the shared checks, run on any back end

/// A back end's diagnostic cube function.
type CubeFn<'a> = dyn Fn(&[FrameView<'_>], &BlobLogParams) -> Vec<Vec<f64>> + 'a;

/// Device cubes vs the scikit-image cube tiles (1e-4 relative) and vs the CPU cube (f32 frames;
/// with `bit_exact` every value must be bit-identical to the CPU's).
fn check_cubes(name: &str, bit_exact: bool, cubes: &CubeFn<'_>) {
    let cases = [
        (
            "hisnr_f32",
            "hisnr_f32__default_rel__cube_r0-96_c0-96.npy",
            0,
            0,
        ),
        (
            "hisnr_f32",
            "hisnr_f32__default_rel__cube_r416-512_c416-512.npy",
            416,
            416,
        ),
        ("overlap_f32", "overlap_f32__default_rel__cube.npy", 0, 0),
    ];
    for (frame, file, r0, c0) in cases {
        let f = Frame::load(frame);
        let p = params(frame, "default_rel");
        let (h, w) = f.view().dim();
        let cube = cubes(&[f.view()], &p).remove(0);
        let golden = load_npy(&format!("blob_log/{file}"));
        let (th, tw, ns) = (golden.shape[0], golden.shape[1], golden.shape[2]);
        let golden: Vec<f64> = golden.f32s().iter().map(|&v| f64::from(v)).collect();
        let got = tile(&cube, (h, w, ns), (r0, c0), (th, tw));
        let err = max_rel_err(&got, &golden);
        let exact = got.iter().zip(&golden).filter(|(a, b)| a == b).count();
        eprintln!(
            "[{name}] cube {file}: max |dev - skimage| / max|skimage| = {err:.3e}, {exact}/{} bit-identical",
            golden.len()
        );
        assert!(err <= 1e-4, "{file}: relative error {err:e}");
        // against the CPU cube of the whole frame
        let Frame::F32(a) = &f else { unreachable!() };
        let img: Vec<f32> = a.iter().copied().collect();
        let cpu: Vec<f64> = log_cube(&img, h, w, &sigma_list::<f32>(1.0, 3.0, 10, false))
            .unwrap()
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let err = max_rel_err(&cube, &cpu);
        let same = cube.iter().zip(&cpu).filter(|(a, b)| a == b).count();
        eprintln!(
            "[{name}] cube {frame} vs CPU: max rel err {err:.3e}, {same}/{} bit-identical",
            cpu.len()
        );
        assert!(err <= 1e-4);
        if bit_exact {
            // float64 accumulation with no contraction rounds like the CPU, whatever the
            // work-group shape or outputs per work-item (ARRAYBRIDGE_DETECT_ROWS / _COLS)
            assert_eq!(
                same,
                cpu.len(),
                "[{name}] cube {frame} is not bit-identical to the CPU"
            );
        }
    }
}

/// Fixture frames × parameter sets: device detections vs CPU detections (and vs the golden
/// CSV, reported). Returns (rows compared, rows differing from the CPU).
fn check_fixture_detections(
    name: &str,
    backend: &dyn DetectBackend,
    expect: Expect,
) -> (usize, usize) {
    let (mut rows, mut differing) = (0usize, 0usize);
    for fname in FRAMES {
        let f = Frame::load(fname);
        for set in SETS {
            let rel = format!("blob_log/{fname}__{set}.csv");
            if !common::fixture(&rel).exists() {
                continue;
            }
            let p = params(fname, set);
            let cpu = blob_log_frame(f.view(), &p).unwrap();
            let dev = backend.blob_log_batch(&[f.view()], &p).unwrap().remove(0);
            let exact = expect.exact(fname.ends_with("f32"));
            let d = diff_rows(&dev, &cpu, !exact);
            let golden = load_csv(&rel);
            eprintln!(
                "[{name}] {rel}: golden {} cpu {} device {}; rows differing from CPU {d}, set diff {}",
                golden.rows.len(),
                cpu.len(),
                dev.len(),
                set_diff(&dev, &cpu)
            );
            rows += cpu.len();
            differing += d;
            // float32 frames: the device cube is the CPU cube bit for bit, so identical output
            if exact {
                assert_eq!(d, 0, "{rel}: device differs from CPU");
            }
        }
    }
    eprintln!("[{name}] fixture detections: {differing} of {rows} rows differ from the CPU");
    (rows, differing)
}

/// Random frames (several shapes including frames smaller than the kernel radius, four pixel
/// types) × parameter sets, device vs CPU. Identity is required for f32 frames and the f64
/// working type as `expect` says; differences are counted.
fn check_random(name: &str, backend: &dyn DetectBackend, expect: Expect) -> (usize, usize) {
    let (mut rows, mut differing) = (0usize, 0usize);
    for (label, f) in random_frames(7) {
        for (pname, p) in random_params() {
            let cpu = blob_log_diag(f.view(), &p);
            let dev = backend.blob_log_batch(&[f.view()], &p);
            let (cpu, dev) = match (cpu, dev) {
                (Ok(c), Ok(d)) => {
                    if pname == "all_maxima" && !label.contains('x') {
                        eprintln!(
                            "[{name}] {label} {pname}: {} candidates before pruning",
                            c.candidates.len()
                        );
                    }
                    (c.blobs, d.remove_first())
                }
                (Err(_), Err(_)) => continue, // e.g. minmax on a constant frame: both refuse
                (c, d) => panic!("{label} {pname}: cpu {:?} vs device {:?}", c.err(), d.err()),
            };
            let exact = expect.exact(label.ends_with("f32"));
            let d = diff_rows(&dev, &cpu, !exact);
            rows += cpu.len();
            differing += d;
            if d > 0 {
                eprintln!(
                    "[{name}] random {label} {pname}: {d} rows differ (cpu {}, device {})",
                    cpu.len(),
                    dev.len()
                );
            }
            if exact {
                assert_eq!(d, 0, "{label} {pname}");
            }
        }
    }
    eprintln!("[{name}] random inputs: {differing} of {rows} rows differ from the CPU");
    (rows, differing)
}

/// What a back end configuration must reproduce exactly.
#[derive(Clone, Copy)]
enum Expect {
    /// Every row bit-identical to the CPU (responses included).
    AllExact,
    /// Everything compared with a response tolerance and counted (float32 accumulation).
    #[cfg_attr(not(feature = "opencl"), allow(dead_code))]
    Counted,
}

impl Expect {
    fn exact(self, _f32_frame: bool) -> bool {
        match self {
            Expect::AllExact => true,
            Expect::Counted => false,
        }
    }
}

trait RemoveFirst {
    fn remove_first(self) -> Vec<Blob>;
}

impl RemoveFirst for Vec<Vec<Blob>> {
    fn remove_first(mut self) -> Vec<Blob> {
        self.remove(0)
    }
}

/// A batch (mixed shapes and types, so several runs) equals the frames one by one, also when
/// the working-set limit forces one frame per sub-batch.
fn check_batch(name: &str, backend: &dyn DetectBackend, small: &dyn DetectBackend) {
    let mut frames: Vec<Frame> = (0..6)
        .map(|k| Frame::F32(spots(96, 80, 40, 1000 + k).mapv(|v| v as f32)))
        .collect();
    frames.push(Frame::U16(
        spots(96, 80, 40, 77).mapv(|v| (v * 20000.0) as u16),
    ));
    frames.push(Frame::F32(spots(50, 60, 20, 78).mapv(|v| v as f32)));
    frames.push(Frame::F32(spots(96, 80, 40, 79).mapv(|v| v as f32)));
    let views: Vec<FrameView<'_>> = frames.iter().map(Frame::view).collect();
    let p = BlobLogParams {
        min_sigma: 1.0,
        max_sigma: 3.0,
        threshold: None,
        threshold_rel: Some(0.1),
        ..BlobLogParams::default()
    };
    let batch = backend.blob_log_batch(&views, &p).unwrap();
    let chunked = small.blob_log_batch(&views, &p).unwrap();
    assert_eq!(batch.len(), views.len());
    let mut total = 0;
    for (k, v) in views.iter().enumerate() {
        let one = backend.blob_log_batch(&[*v], &p).unwrap().remove(0);
        assert_eq!(batch[k], one, "frame {k}: batch vs single");
        assert_eq!(chunked[k], one, "frame {k}: sub-batched vs single");
        total += one.len();
    }
    eprintln!(
        "[{name}] batch of {} frames == one by one ({total} blobs)",
        views.len()
    );
}

// ------------------------------------------------------------------------------------------
// NVRTC

#[cfg(feature = "cuda")]
#[test]
fn kernels_compile_with_nvrtc() {
    for src in algorithms::detect::kernels::ALL {
        match bridge_cuda::kernel::compile_check(src) {
            Ok(true) => eprintln!(
                "NVRTC: {} compiled ({} option sets)",
                src.name,
                src.option_sets.len()
            ),
            Ok(false) => test_support::require::skip(
                Some(test_support::require::NVRTC),
                "libnvrtc",
                src.name,
            ),
            Err(e) => panic!("{}: {e}", src.name),
        }
    }
}

// ------------------------------------------------------------------------------------------
// OpenCL

/// The fused passes give the two passes' cube bit for bit, and the blobs of thresholds from
/// their regions' extrema (no `cube_minmax`) are the two passes', in float64 and float32 (the
/// blobs also with the certified search, `Precision::Auto`): `log_pass_tile` (tiles of 1, 3 and
/// 8 rows, 16 or 32 columns) and `log_pass_block` (blocks of 1 to 16 rows, 1 to 5 columns a
/// work item, work groups of 8 to 32 by 1 to 4, 1 to 8 rows a work item in its y pass, odd and
/// even; its extrema in one or two row parts and strips of 8 or 16 work items); frames narrower and shorter than a kernel (edges reflected more than once), a
/// region's rows and columns past the frame, a scale wider than the region (the run takes the
/// two passes), u16 and f32 frames.
fn check_tiled_pass<E: bridge_core::exec::Executor>(
    base: &algorithms::detect::GpuDetect<E>,
    name: &str,
) {
    use bridge_core::tuning::Tuning;
    // (fused pass, WG_X, WG_Y, ROWS) as knobs
    let with = |knobs: &[(&str, &str)], precision: Precision| {
        let mut tuning = Tuning::default()
            .with("ARRAYBRIDGE_DETECT_TILE", "0")
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_BLOCK", "0"))
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_WG_X", "32"))
            .unwrap();
        for &(k, v) in knobs {
            tuning = tuning.with(&format!("ARRAYBRIDGE_DETECT_{k}"), v).unwrap();
        }
        base.clone().with_config(GpuDetectConfig {
            tuning,
            precision,
            ..base.config().clone()
        })
    };
    let tile = |rows: &'static str, wg: &'static str| vec![("TILE", rows), ("WG_X", wg)];
    let block = |rows: &'static str,
                 cols: &'static str,
                 wg: (&'static str, &'static str),
                 y: &'static str| {
        vec![
            ("BLOCK", rows),
            ("BLOCK_COLS", cols),
            ("WG_X", wg.0),
            ("WG_Y", wg.1),
            ("ROWS", y),
        ]
    };
    let for_blobs = [
        tile("3", "32"),
        tile("8", "16"),
        block("16", "3", ("32", "4"), "8"),
        block("3", "2", ("16", "1"), "1"),
    ];
    let for_cubes = [
        tile("1", "16"),
        tile("3", "32"),
        tile("8", "32"),
        tile("8", "16"),
        block("16", "3", ("32", "4"), "8"),
        block("3", "2", ("16", "1"), "1"),
        block("1", "5", ("8", "2"), "4"),
        block("6", "1", ("16", "3"), "3"),
    ];
    let mut frames = Vec::new();
    for (k, &(h, w)) in [(5, 7), (19, 64), (64, 19), (70, 33), (41, 130)]
        .iter()
        .enumerate()
    {
        let f = spots(h, w, 1 + h * w / 200, 70 + k as u64);
        frames.push(Frame::F32(f.mapv(|v| v as f32)));
        frames.push(Frame::U16(f.mapv(|v| (v * 3000.0) as u16)));
    }
    let sets = [
        BlobLogParams {
            min_sigma: 1.0,
            max_sigma: 3.0,
            num_sigma: 6,
            ..BlobLogParams::default()
        },
        BlobLogParams {
            min_sigma: 0.5,
            max_sigma: 7.5,
            num_sigma: 4,
            ..BlobLogParams::default()
        },
    ];
    let (mut compared, mut blob_sets) = (0, 0);
    for precision in [Precision::F64, Precision::F32, Precision::Auto] {
        for p in &sets {
            for f in &frames {
                let one = [f.view()];
                // the thresholds from the regions' extrema: the same blobs
                let rel = BlobLogParams {
                    threshold: None,
                    threshold_rel: Some(0.1),
                    ..p.clone()
                };
                let blobs = with(&[], precision).blob_log_batch(&one, &rel).unwrap();
                for knobs in &for_blobs {
                    let fused = with(knobs, precision).blob_log_batch(&one, &rel).unwrap();
                    assert_eq!(fused, blobs, "{knobs:?} {precision:?}");
                    blob_sets += 1;
                }
                if precision == Precision::Auto {
                    // the certified search reads no cube back
                    continue;
                }
                let two = with(&[], precision).log_cubes(&one, p).unwrap();
                let bits = |c: &[Vec<f64>]| -> Vec<u64> {
                    c.iter().flatten().map(|v| v.to_bits()).collect()
                };
                for knobs in &for_cubes {
                    let fused = with(knobs, precision).log_cubes(&one, p).unwrap();
                    assert_eq!(
                        bits(&fused),
                        bits(&two),
                        "{knobs:?} {precision:?} {:?} sigma {}",
                        f.view().dim(),
                        p.max_sigma
                    );
                    compared += 1;
                }
            }
        }
    }
    eprintln!("[{name}] fused passes == two passes on {compared} cubes and {blob_sets} blob sets");
}

/// [`Precision::F64`] with the cube in the working type (not the certified search, the
/// default).
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn working_type_cube() -> GpuDetectConfig {
    GpuDetectConfig {
        precision: Precision::F64,
        tuning: bridge_core::tuning::Tuning::default()
            .with("ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED", "0")
            .unwrap(),
        ..GpuDetectConfig::default()
    }
}

/// Issue 29: the certified search (an f32 cube on the device with the CPU's proven error
/// bound, settled with exact f64 voxels on the host) gives the CPU's blobs bit for bit, and
/// says which frames it searched and which it left to the CPU: spot frames of every pixel
/// type are certified on the device; a constant frame, or a frame of a NaN, is computed on
/// the CPU (the same blobs, none); without a threshold, or with the knob at 0, nothing is
/// searched that way. The passes' multiply-adds fused (`ARRAYBRIDGE_DETECT_PASS_FMA=1`) or
/// not, and the frames' largest magnitudes scanned by `cert_frames` alone or by several
/// groups a frame (`ARRAYBRIDGE_DETECT_SCAN_GROUPS`, every frame of every case), give the
/// same blobs.
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn check_certified_search<E: bridge_core::exec::Executor>(
    d: &algorithms::detect::gpu::GpuDetect<E>,
) {
    d.take_certified();
    let img = spots(96, 80, 40, 11);
    let frames = every_dtype(&img);
    let params = random_params();
    // the float32 passes' multiply-adds fused and not (within the same bound), the largest
    // magnitudes by one group a frame or in parts (3 groups, and one a 256 pixels)
    let knobs = |fma: &str, scan: &str| {
        d.clone().with_config(GpuDetectConfig {
            tuning: bridge_core::tuning::Tuning::default()
                .with("ARRAYBRIDGE_DETECT_PASS_FMA", fma)
                .unwrap()
                .with("ARRAYBRIDGE_DETECT_SCAN_GROUPS", scan)
                .unwrap(),
            ..d.config().clone()
        })
    };
    for dev in [knobs("0", "0"), knobs("1", "3"), knobs("0", "1024")] {
        for (pname, p) in &params {
            for f in &frames {
                let cpu = blob_log_diag(f.view(), p).unwrap().blobs;
                let got = dev.blob_log_batch(&[f.view()], p).unwrap().remove_first();
                assert_eq!(got, cpu, "{pname}");
            }
            let (n, on_cpu) = d.take_certified();
            if *pname == "no_threshold" {
                assert_eq!((n, on_cpu), (0, 0), "{pname}");
            } else {
                assert_eq!((n, on_cpu), (4, 0), "{pname}");
            }
        }
    }
    // a blank movie with a relative threshold (every voxel within the margin of the
    // threshold) and an absolute threshold beyond f32's range: the CPU's blobs (none), the
    // blank frames computed on the CPU without reading their voxels back, the others
    // searched on the device
    let blank: Vec<Frame> = (0..3)
        .map(|_| Frame::U16(Array2::from_elem((64, 64), 0u16)))
        .collect();
    let views: Vec<_> = blank.iter().map(Frame::view).collect();
    let rel = &params[0].1;
    assert!(rel.threshold_rel.is_some());
    for (f, got) in blank.iter().zip(d.blob_log_batch(&views, rel).unwrap()) {
        assert_eq!(got, blob_log_diag(f.view(), rel).unwrap().blobs);
    }
    assert_eq!(d.take_certified(), (3, 3));
    let huge = BlobLogParams {
        threshold: Some(1e39),
        threshold_rel: None,
        ..rel.clone()
    };
    let views: Vec<_> = frames.iter().map(Frame::view).collect();
    for (f, got) in frames.iter().zip(d.blob_log_batch(&views, &huge).unwrap()) {
        assert_eq!(got, blob_log_diag(f.view(), &huge).unwrap().blobs);
    }
    assert_eq!(d.take_certified(), (4, 0));
    let p = &params[1].1;
    let flat = Frame::F32(Array2::from_elem((40, 40), 0.5f32));
    let mut nan = img.mapv(|v| v as f32);
    nan[[7, 9]] = f32::NAN;
    // magnitudes beyond 10^±20 (the bound's range; the CPU's own certified search declines
    // them too) with thresholds scaled alike: the CPU computes them, with the CPU's blobs
    let scaled = |k: f64| BlobLogParams {
        threshold: p.threshold.map(|t| t * k),
        ..p.clone()
    };
    let huge = (Frame::F64(img.mapv(|v| v * 1e25)), scaled(1e25));
    let tiny = (Frame::F64(img.mapv(|v| v * 1e-25)), scaled(1e-25));
    let cases = [(flat, p.clone()), (Frame::F32(nan), p.clone()), huge, tiny];
    for (f, q) in &cases {
        for dev in [d.clone(), knobs("0", "0"), knobs("1", "7")] {
            let cpu = blob_log_diag(f.view(), q).map(|d| d.blobs);
            let got = dev.blob_log_batch(&[f.view()], q).map(|b| b.remove_first());
            match (cpu, got) {
                (Ok(c), Ok(v)) => {
                    assert_eq!(v, c);
                    assert_eq!(d.take_certified(), (1, 1));
                }
                (Err(_), Err(_)) => {}
                (c, v) => panic!("cpu {c:?} vs device {v:?}"),
            }
        }
    }
    let (huge, tiny) = (&cases[2], &cases[3]);
    assert!(
        !blob_log_diag(huge.0.view(), &huge.1)
            .unwrap()
            .blobs
            .is_empty()
    );
    assert!(
        !blob_log_diag(tiny.0.view(), &tiny.1)
            .unwrap()
            .blobs
            .is_empty()
    );
    let off = d.clone().with_config(working_type_cube());
    let f = frames[2].view();
    assert_eq!(
        off.blob_log_batch(&[f], p).unwrap(),
        d.blob_log_batch(&[f], p).unwrap()
    );
    assert_eq!(off.take_certified(), (1, 0), "clones share the count");
    off.blob_log_batch(&[f], p).unwrap();
    assert_eq!(off.take_certified(), (0, 0));
}

#[cfg(feature = "opencl")]
mod opencl {
    use super::*;
    use algorithms::detect::gpu::OpenClDetect;

    fn device() -> Option<OpenClDetect> {
        match algorithms::exec::OpenClExecutor::new(
            crate::open::opencl(),
            bridge_core::Device::OpenCl(0),
        )
        .map(OpenClDetect::with_executor)
        {
            Ok(d) => Some(d),
            Err(e) => {
                if env_flag("ARRAYBRIDGE_REQUIRE_OPENCL") {
                    panic!("ARRAYBRIDGE_REQUIRE_OPENCL=1 but no OpenCL device: {e}");
                }
                eprintln!("skipping: no OpenCL device ({e})");
                None
            }
        }
    }

    /// A device out of memory (here a pool limit of 8 MiB, on a backend instance of this
    /// test's own, so no other test sees it) halves the batch until it fits: the same blobs
    /// and features as unlimited, and the pool never held more than the limit.
    #[test]
    fn out_of_memory_halves_the_batch_with_the_same_results() {
        use bridge_core::Device;
        use bridge_core::memory::{MemoryInfo, MemoryLimit};
        let Some(base) = device() else { return };
        let dev = Device::OpenCl(0);
        let own = std::sync::Arc::new(bridge_opencl::OpenClBackend::new());
        let limited = OpenClDetect::with_executor(
            algorithms::exec::OpenClExecutor::new(own.clone(), dev).unwrap(),
        );
        let frames: Vec<Frame> = (0..16)
            .map(|k| {
                let img = spots(128, 128, 20, 40 + k);
                let max = img.iter().fold(0.0f64, |m, v| m.max(*v));
                Frame::U16(img.mapv(|v| (v / max * 60000.0).round() as u16))
            })
            .collect();
        let views: Vec<_> = frames.iter().map(Frame::view).collect();
        let (_, p) = random_params().remove(0);
        let lp = algorithms::detect::locate::LocateParams::new(5);
        let want = base.blob_log_batch(&views, &p).unwrap();
        let want_f = base.locate_batch(&views, &lp).unwrap();
        // the float64 cube of all 16 frames takes 20 MiB: the batch must be halved
        let limit = 8u64 << 20;
        let total = own.memory_stats(dev).unwrap().total;
        let fraction = (limit as f64 + 0.5) / total as f64;
        own.set_memory_limit(dev, Some(MemoryLimit::fraction(fraction).unwrap()))
            .unwrap();
        assert_eq!(own.pool_stats(dev).unwrap().limit, Some(limit));
        assert_eq!(limited.blob_log_batch(&views, &p).unwrap(), want);
        assert_eq!(limited.locate_batch(&views, &lp).unwrap(), want_f);
        let st = own.pool_stats(dev).unwrap();
        assert!(st.peak_reserved > 0 && st.peak_reserved <= limit, "{st:?}");
        // one frame that cannot fit is the error, typed
        own.set_memory_limit(
            dev,
            Some(MemoryLimit::fraction(1024.0 / total as f64).unwrap()),
        )
        .unwrap();
        let e = limited.blob_log_batch(&views[..2], &p).unwrap_err();
        assert!(e.is_oom(), "{e}");
    }

    /// The pipeline's knobs are a value of its configuration: other work-group shapes, pass
    /// blocking and prescale groups, set by value next to the defaults in this one process,
    /// give the same blobs and features.
    #[test]
    fn knobs_set_by_value_change_no_result() {
        use bridge_core::tuning::Tuning;
        let Some(base) = device() else { return };
        let t = Tuning::default()
            .with("ARRAYBRIDGE_DETECT_WG_X", "32")
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_WG_Y", "3"))
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_ROWS", "3"))
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_COLS", "5"))
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_PREP_WG", "64"))
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_MAX_MB", "1"))
            .and_then(|t| t.with("ARRAYBRIDGE_DETECT_SCAN_GROUPS", "5"))
            .unwrap();
        let tuned = base.clone().with_config(GpuDetectConfig {
            tuning: t.clone(),
            ..base.config().clone()
        });
        assert_eq!(tuned.config().tuning, t);
        let (_, p) = random_params().remove(0);
        let lp = algorithms::detect::locate::LocateParams::new(5);
        for (name, f) in random_frames(11) {
            let frames = [f.view()];
            assert_eq!(
                tuned.blob_log_batch(&frames, &p).unwrap(),
                base.blob_log_batch(&frames, &p).unwrap(),
                "{name}"
            );
            match (
                tuned.locate_batch(&frames, &lp),
                base.locate_batch(&frames, &lp),
            ) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
                (a, b) => assert_eq!(a.is_err(), b.is_err(), "{name}"),
            }
        }
    }

    /// The sub-batch budget: an explicit `max_device_bytes` wins, then
    /// `ARRAYBRIDGE_DETECT_MAX_MB`, then the device's (512 MiB on a CPU device such as PoCL;
    /// a quarter of what a GPU could allocate, 64 MiB to 8 GiB).
    #[test]
    fn the_sub_batch_budget_comes_from_the_config_the_knob_or_the_device() {
        use bridge_core::exec::Executor;
        use bridge_core::tuning::Tuning;
        let Some(base) = device() else { return };
        let e = base.executor();
        let auto = GpuDetectConfig::default();
        assert_eq!(auto.max_device_bytes, 0);
        let stats = e.memory_stats().expect("OpenCL reports its memory");
        assert!(stats.total > 0 && stats.available() <= stats.total + stats.pool_cached);
        let want = if e.is_cpu() {
            512 << 20
        } else {
            usize::try_from(stats.available() / 4)
                .unwrap()
                .clamp(64 << 20, 8192 << 20)
        };
        assert_eq!(auto.device_budget(e), want);
        let knob = GpuDetectConfig {
            tuning: Tuning::default()
                .with("ARRAYBRIDGE_DETECT_MAX_MB", "3")
                .unwrap(),
            ..GpuDetectConfig::default()
        };
        assert_eq!(knob.device_budget(e), 3 << 20);
        let explicit = GpuDetectConfig {
            max_device_bytes: 12345,
            ..knob
        };
        assert_eq!(explicit.device_budget(e), 12345);
    }

    /// See [`super::check_tiled_pass`].
    #[test]
    fn tiled_pass_gives_the_two_passes_cube() {
        let Some(base) = device() else { return };
        super::check_tiled_pass(&base, "opencl");
    }

    #[test]
    fn opencl_cube_matches_fixtures_and_cpu() {
        let Some(d) = device() else { return };
        eprintln!("opencl:0 fp64 = {}", d.has_fp64());
        // float64 accumulation rounds like the CPU; a device without doubles accumulates in f32
        check_cubes("opencl", d.has_fp64(), &|f, p| d.log_cubes(f, p).unwrap());
    }

    #[test]
    fn opencl_detections_match_cpu_on_fixtures() {
        let Some(d) = device() else { return };
        // the default (Auto) with doubles: the CPU's working type, every row the CPU's
        let want = if d.has_fp64() {
            Expect::AllExact
        } else {
            Expect::Counted
        };
        let (rows, diff) = check_fixture_detections("opencl default", &d, want);
        assert!(diff * 100 <= rows, "{diff} of {rows}");
        if d.has_fp64() {
            check_fixture_detections(
                "opencl match-cpu",
                &d.clone().with_config(working_type_cube()),
                Expect::AllExact,
            );
        }
    }

    /// A device without doubles (PoCL told so: `OpenClExecutor::without_fp64`) gives the
    /// CPU's blobs bit for bit too wherever the certified search applies (a threshold; u8 and
    /// u16 frames then converted on the host), with float32 kernels only; without a threshold
    /// it takes the float32 cube (within tolerance, counted); `Precision::F64` is refused.
    #[test]
    fn a_device_without_doubles_gives_the_cpus_blobs_with_a_threshold() {
        let Some(d) = device() else { return };
        let exec = d.executor().clone().without_fp64();
        let d32 = OpenClDetect::with_executor(exec);
        assert!(!d32.has_fp64());
        let frames = every_dtype(&spots(70, 90, 30, 23));
        d32.take_certified();
        for (pname, p) in random_params() {
            let views: Vec<_> = frames.iter().map(Frame::view).collect();
            let dev = d32.blob_log_batch(&views, &p).unwrap();
            let (n, on_cpu) = d32.take_certified();
            for (f, got) in frames.iter().zip(&dev) {
                let cpu = blob_log_diag(f.view(), &p).unwrap().blobs;
                if pname == "no_threshold" {
                    assert!(
                        diff_rows(got, &cpu, true) * 10 <= cpu.len().max(10),
                        "{pname}"
                    );
                } else {
                    assert_eq!(got, &cpu, "{pname}");
                }
            }
            let want = if pname == "no_threshold" { 0 } else { 4 };
            assert_eq!((n, on_cpu), (want, 0), "{pname}");
        }
        let f64_only = d32.clone().with_config(GpuDetectConfig {
            precision: Precision::F64,
            ..GpuDetectConfig::default()
        });
        let e = f64_only
            .blob_log_batch(&[frames[0].view()], &random_params()[0].1)
            .unwrap_err();
        assert!(e.to_string().contains("no doubles"), "{e}");
    }

    /// See [`super::check_certified_search`].
    #[test]
    fn certified_search_gives_the_cpus_blobs_and_counts_its_frames() {
        let Some(d) = device() else { return };
        if d.has_fp64() {
            super::check_certified_search(&d);
        }
    }

    #[test]
    fn opencl_detections_match_cpu_on_random_inputs() {
        let Some(d) = device() else { return };
        let want = if d.has_fp64() {
            Expect::AllExact
        } else {
            Expect::Counted
        };
        let (rows, diff) = check_random("opencl default", &d, want);
        assert!(diff * 100 <= rows.max(100), "{diff} of {rows}");
        if d.has_fp64() {
            check_random(
                "opencl match-cpu",
                &d.clone().with_config(working_type_cube()),
                Expect::AllExact,
            );
        }
    }

    /// float32 accumulation (the path of devices without doubles): cube within 1e-4 of
    /// scikit-image and of the CPU; detection differences counted and bounded.
    #[test]
    fn opencl_f32_accumulation_within_tolerance() {
        let Some(d) = device() else { return };
        let d = d.with_config(GpuDetectConfig {
            precision: Precision::F32,
            ..GpuDetectConfig::default()
        });
        check_cubes("opencl acc32", false, &|f, p| d.log_cubes(f, p).unwrap());
        let (rows, diff) = check_fixture_detections("opencl acc32", &d, Expect::Counted);
        assert!(diff * 100 <= rows, "{diff} of {rows}");
        let (rows, diff) = check_random("opencl acc32", &d, Expect::Counted);
        assert!(diff * 100 <= rows.max(100), "{diff} of {rows}");
    }

    /// `blob_log_batch_acc`: Auto is the default path, F32 the float32-accumulation path.
    #[test]
    fn opencl_batch_acc_selects_accumulation() {
        let Some(d) = device() else { return };
        let f = Frame::load("overlap_f32");
        let p = params("overlap_f32", "default_rel");
        let cpu = blob_log_frame(f.view(), &p).unwrap();
        let a64 = d
            .blob_log_batch_acc(&[f.view()], &p, Precision::Auto)
            .unwrap()
            .remove(0);
        assert_eq!(a64, cpu);
        let a32 = d
            .blob_log_batch_acc(&[f.view()], &p, Precision::F32)
            .unwrap()
            .remove(0);
        assert_eq!(set_diff(&a32, &cpu), 0);
        assert!(d.last_kernel_seconds().unwrap() > 0.0);
    }

    #[test]
    fn opencl_batch_equals_single_frames() {
        let Some(d) = device() else { return };
        let small = d.clone().with_config(GpuDetectConfig {
            max_device_bytes: 1,
            ..GpuDetectConfig::default()
        });
        check_batch("opencl", &d, &small);
    }

    #[test]
    fn opencl_backend_for_dispatch() {
        let Some(_) = device() else { return };
        let b = open::detect_backend(bridge_core::Device::OpenCl(0)).unwrap();
        assert_eq!(b.device(), bridge_core::Device::OpenCl(0));
    }

    /// The seed-style `LogDetector` on a u16 movie (batches of 4, a partial last batch): the
    /// same particles on `opencl:0` as on the CPU.
    #[test]
    fn opencl_log_detector_movie_matches_cpu() {
        let Some(_) = device() else { return };
        let mut movie = ndarray::Array3::<u16>::zeros((7, 80, 72));
        for t in 0..7 {
            let f = spots(80, 72, 25, 500 + t as u64);
            movie
                .index_axis_mut(ndarray::Axis(0), t)
                .assign(&f.mapv(|v| (v * 300.0) as u16));
        }
        let movie = algorithms::detect::Movie::U16(movie);
        let det = algorithms::detect::LogDetector::default();
        let cpu = det
            .detect_movie(&movie, &open::open(bridge_core::Device::Cpu))
            .unwrap();
        let dev = det
            .detect_movie(&movie, &open::open(bridge_core::Device::OpenCl(0)))
            .unwrap();
        assert_eq!(cpu.len(), dev.len());
        for (a, b) in cpu.iter().zip(&dev) {
            assert_eq!((a.frame, a.y, a.x, a.sigma), (b.frame, b.y, b.x, b.sigma));
            assert!((a.response - b.response).abs() <= 1e-6 * a.response.abs().max(1e-3));
        }
        eprintln!("[opencl] LogDetector movie: {} particles == CPU", cpu.len());
    }

    /// `detect_movie_with` with 1, 2 and 3 batches in flight (`ARRAYBRIDGE_DETECT_IN_FLIGHT`,
    /// set by value) on a u16 movie in batches of 2 (a partial last one), with refinement:
    /// the CPU's particles, every field; progress in order up to every frame. A batch that
    /// fails (minmax prescale on a constant frame) is the call's error, naming its frames, the
    /// same whatever the batches in flight, and no progress is reported past it.
    #[test]
    fn opencl_batches_in_flight_give_the_cpus_particles() {
        use algorithms::detect::{LogDetector, Movie, RefineParams};
        use bridge_core::tuning::Tuning;
        let Some(base) = device() else { return };
        let (t, h, w) = (13, 96, 88);
        let mut movie = ndarray::Array3::<u16>::zeros((t, h, w));
        for k in 0..t {
            let f = spots(h, w, 30, 900 + k as u64);
            movie
                .index_axis_mut(ndarray::Axis(0), k)
                .assign(&f.mapv(|v| (v * 4000.0) as u16));
        }
        let det = LogDetector {
            batch_size: 2,
            refine: Some(RefineParams::default()),
            ..LogDetector::default()
        };
        let with = |n: &str| {
            let tuning = Tuning::default()
                .with("ARRAYBRIDGE_DETECT_IN_FLIGHT", n)
                .unwrap();
            base.clone().with_config(GpuDetectConfig {
                tuning,
                ..base.config().clone()
            })
        };
        let good = Movie::U16(movie.clone());
        let cpu = det
            .detect_movie_with(&good, &algorithms::detect::CpuBackend::default(), |_| {})
            .unwrap();
        assert!(cpu.len() > 100, "{}", cpu.len());
        let mut bad = movie;
        bad.index_axis_mut(ndarray::Axis(0), 7).fill(500);
        let bad = Movie::U16(bad);
        let minmax = LogDetector {
            params: BlobLogParams {
                prescale: Prescale::MinMax,
                ..det.params.clone()
            },
            ..det.clone()
        };
        let mut errors = Vec::new();
        for n in ["1", "2", "3"] {
            let b = with(n);
            assert_eq!(b.batches_in_flight(), n.parse::<usize>().unwrap());
            let mut seen = Vec::new();
            let dev = det.detect_movie_with(&good, &b, |d| seen.push(d)).unwrap();
            assert_eq!(dev, cpu, "{n} in flight");
            assert_eq!(seen, vec![2, 4, 6, 8, 10, 12, 13], "{n} in flight");
            let mut seen = Vec::new();
            let err = minmax
                .detect_movie_with(&bad, &b, |d| seen.push(d))
                .unwrap_err()
                .to_string();
            assert!(err.contains("6..8") && err.contains("constant"), "{err}");
            assert!(seen.iter().all(|&d| d <= 6), "{seen:?}");
            errors.push(err);
        }
        assert!(errors.windows(2).all(|e| e[0] == e[1]), "{errors:?}");
        eprintln!(
            "[opencl] 1/2/3 batches in flight: {} particles == CPU",
            cpu.len()
        );
    }

    /// Timing on a 512×512 frame (reported, not asserted): a batch of 8 copies of hisnr_f32.
    #[test]
    fn opencl_time_per_512_frame() {
        let Some(d) = device() else { return };
        let f = Frame::load("hisnr_f32");
        let views: Vec<FrameView<'_>> = (0..8).map(|_| f.view()).collect();
        let p = params("hisnr_f32", "default_rel");
        d.blob_log_batch(&views[..1], &p).unwrap(); // build the program
        let t = std::time::Instant::now();
        let out = d.blob_log_batch(&views, &p).unwrap();
        let dt = t.elapsed().as_secs_f64();
        let kt = d.last_kernel_seconds().unwrap();
        let t = std::time::Instant::now();
        let cpu: Vec<_> = views
            .iter()
            .map(|v| blob_log_frame(*v, &p).unwrap())
            .collect();
        let dc = t.elapsed().as_secs_f64();
        assert_eq!(out, cpu);
        eprintln!(
            "opencl f32 frames: {:.1} ms per 512x512 frame (batch of 8, 10 scales; kernels {:.1} ms); CPU blob_log_frame {:.1} ms per frame",
            dt * 1e3 / 8.0,
            kt * 1e3 / 8.0,
            dc * 1e3 / 8.0
        );
        // raw u16 upload, converted on the device
        let f = Frame::load("hisnr_u16");
        let views: Vec<FrameView<'_>> = (0..8).map(|_| f.view()).collect();
        let p = params("hisnr_u16", "default_rel");
        let t = std::time::Instant::now();
        let out = d.blob_log_batch(&views, &p).unwrap();
        let dt = t.elapsed().as_secs_f64();
        assert_eq!(out[0].len(), 100);
        eprintln!(
            "opencl u16 frames: {:.1} ms per 512x512 frame (kernels {:.1} ms)",
            dt * 1e3 / 8.0,
            d.last_kernel_seconds().unwrap() * 1e3 / 8.0
        );
    }
}

// ------------------------------------------------------------------------------------------
// CUDA

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use algorithms::detect::gpu::CudaDetect;

    /// Volumes (n-D `blob_log`, its scale space on `cuda:0`) give the CPU's rows, threshold
    /// and candidate count: random real-like volumes of every pixel type, scalar and per-axis
    /// σ (the fixture cases run in `tests/blob_log_nd.rs`; this binary is the one the GPU
    /// harness carries).
    #[test]
    fn cuda_volumes_equal_the_cpu() {
        use algorithms::detect::blob_log::nd::{
            BlobLogNdParams, Sigma, VolumeView, blob_log_nd_on_device, blob_log_nd_view,
        };
        use ndarray::{ArrayD, IxDyn};
        let Some(dev) = handle() else {
            return;
        };
        let mut r = Rng(11);
        let mut rows = 0;
        for shape in [vec![9usize, 23, 31], vec![5, 6, 11, 13], vec![40, 48]] {
            let n: usize = shape.iter().product();
            let vals: Vec<f64> = (0..n).map(|_| 0.1 + 0.05 * r.uniform()).collect();
            let mut img = ArrayD::from_shape_vec(IxDyn(&shape), vals).unwrap();
            for _ in 0..4 {
                let c: Vec<f64> = shape.iter().map(|&d| r.uniform() * d as f64).collect();
                for (idx, v) in img.indexed_iter_mut() {
                    let d2: f64 = (0..shape.len())
                        .map(|a| (idx[a] as f64 - c[a]).powi(2))
                        .sum();
                    *v += 0.8 * (-d2 / 4.5).exp();
                }
            }
            let per_axis: Vec<f64> = (0..shape.len()).map(|a| 1.0 + 0.5 * a as f64).collect();
            let params = [
                BlobLogNdParams {
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
                    ..BlobLogNdParams::default()
                },
            ];
            let f32s = img.mapv(|v| v as f32);
            let u16s = img.mapv(|v| (v * 30000.0) as u16);
            for p in &params {
                for view in [
                    VolumeView::F64(img.view()),
                    VolumeView::F32(f32s.view()),
                    VolumeView::U16(u16s.view()),
                ] {
                    let cpu = blob_log_nd_view(view.clone(), p).unwrap();
                    let got = blob_log_nd_on_device(&dev, view, Prescale::Legacy, p).unwrap();
                    assert_eq!(got, cpu, "{shape:?}");
                    rows += cpu.rows.len();
                }
            }
        }
        eprintln!("cuda:0 volumes: {rows} rows, all the CPU's");
    }

    /// trackpy's `locate` on volumes and 2-D images with sizes per axis (its bandpass on
    /// `cuda:0`) gives the CPU's features bit for bit: random real-like images of every pixel
    /// type, two parameter sets (the fixture cases and more run on OpenCL in
    /// `tests/detect_locate_nd.rs`; this binary is the one the GPU harness carries).
    #[test]
    fn cuda_locate_volumes_equal_the_cpu() {
        use algorithms::detect::blob_log::nd::VolumeView;
        use algorithms::detect::locate::{LocateNdParams, locate_nd, locate_nd_on_device};
        use ndarray::{ArrayD, IxDyn};
        let Some(dev) = handle() else {
            return;
        };
        let mut r = Rng(23);
        let mut rows = 0;
        for shape in [vec![14usize, 40, 36], vec![50, 61]] {
            let n: usize = shape.iter().product();
            let vals: Vec<f64> = (0..n).map(|_| 0.05 + 0.1 * r.uniform()).collect();
            let mut img = ArrayD::from_shape_vec(IxDyn(&shape), vals).unwrap();
            for _ in 0..6 {
                let c: Vec<f64> = shape.iter().map(|&d| r.uniform() * d as f64).collect();
                for (idx, v) in img.indexed_iter_mut() {
                    let d2: f64 = (0..shape.len())
                        .map(|a| (idx[a] as f64 - c[a]).powi(2))
                        .sum();
                    *v += 0.8 * (-d2 / 3.0).exp();
                }
            }
            let d = if shape.len() == 3 {
                vec![5, 5, 5]
            } else {
                vec![7, 5]
            };
            let params = [
                LocateNdParams::new(d.clone()),
                LocateNdParams {
                    invert: true,
                    smoothing_size: Some(vec![9; shape.len()]),
                    noise_size: (0..shape.len()).map(|a| 1.0 + 0.25 * a as f64).collect(),
                    ..LocateNdParams::new(d)
                },
            ];
            let top = img.iter().fold(0f64, |m, &v| m.max(v));
            let f32s = img.mapv(|v| v as f32);
            let u16s = img.mapv(|v| (v / top * 60000.0) as u16);
            let u8s = img.mapv(|v| (v / top * 250.0) as u8);
            for p in &params {
                for view in [
                    VolumeView::F64(img.view()),
                    VolumeView::F32(f32s.view()),
                    VolumeView::U16(u16s.view()),
                    VolumeView::U8(u8s.view()),
                ] {
                    let cpu = locate_nd(view.clone(), p).unwrap();
                    let got = locate_nd_on_device(&dev, view, p).unwrap();
                    let bits = |f: &algorithms::detect::locate::FeaturesNd| -> Vec<Vec<u64>> {
                        f.rows
                            .iter()
                            .map(|row| row.iter().map(|v| v.to_bits()).collect())
                            .collect()
                    };
                    assert_eq!(got.columns, cpu.columns, "{shape:?}");
                    assert_eq!(bits(&got), bits(&cpu), "{shape:?}");
                    rows += cpu.rows.len();
                }
            }
        }
        eprintln!("cuda:0 locate on volumes: {rows} features, all the CPU's");
    }

    fn device() -> Option<CudaDetect> {
        executor().map(CudaDetect::with_executor)
    }

    /// `cuda:0`'s executor; `None` (skip) without a CUDA device unless
    /// `ARRAYBRIDGE_REQUIRE_GPU=1` (then a failure).
    fn executor() -> Option<algorithms::exec::CudaExecutor> {
        match algorithms::exec::CudaExecutor::new(0) {
            Ok(e) => Some(e),
            Err(e) => {
                if env_flag("ARRAYBRIDGE_REQUIRE_GPU") {
                    panic!("ARRAYBRIDGE_REQUIRE_GPU=1 but no CUDA device: {e}");
                }
                eprintln!("skipping: no CUDA device ({e})");
                None
            }
        }
    }

    /// A handle of `cuda:0` ([`executor`]).
    fn handle() -> Option<algorithms::exec::DeviceHandle> {
        executor().map(|e| {
            algorithms::exec::DeviceHandle::from_executor(algorithms::exec::AnyExecutor::Cuda(e))
        })
    }

    /// See [`super::check_tiled_pass`].
    #[test]
    fn cuda_tiled_pass_gives_the_two_passes_cube() {
        let Some(base) = device() else { return };
        super::check_tiled_pass(&base, "cuda");
    }

    #[test]
    fn cuda_cube_matches_fixtures_and_cpu() {
        let Some(d) = device() else { return };
        // bit-identical unless NVRTC was told to contract (ARRAYBRIDGE_NVRTC_OPTIONS=--fmad=true)
        let fmad = bridge_core::tuning::process()
            .raw("ARRAYBRIDGE_NVRTC_OPTIONS")
            .is_some_and(|o| o.contains("fmad=true"));
        check_cubes("cuda", !fmad && d.has_fp64(), &|f, p| {
            d.log_cubes(f, p).unwrap()
        });
    }

    #[test]
    fn cuda_detections_match_cpu() {
        let Some(d) = device() else { return };
        // the default (Auto): every row the CPU's on a GPU with doubles (all NVIDIA GPUs)
        check_fixture_detections("cuda default", &d, Expect::AllExact);
        check_random("cuda default", &d, Expect::AllExact);
        // the cube in the working type (not the certified search)
        let m = d.clone().with_config(working_type_cube());
        check_fixture_detections("cuda match-cpu", &m, Expect::AllExact);
        check_random("cuda match-cpu", &m, Expect::AllExact);
    }

    /// See [`super::check_certified_search`].
    #[test]
    fn cuda_certified_search_gives_the_cpus_blobs_and_counts_its_frames() {
        let Some(d) = device() else { return };
        super::check_certified_search(&d);
    }

    #[test]
    fn cuda_batch_equals_single_frames() {
        let Some(d) = device() else { return };
        let small = d.clone().with_config(GpuDetectConfig {
            max_device_bytes: 1,
            ..GpuDetectConfig::default()
        });
        check_batch("cuda", &d, &small);
    }

    #[test]
    fn cuda_time_per_512_frame() {
        let Some(d) = device() else { return };
        let f = Frame::load("hisnr_f32");
        let views: Vec<FrameView<'_>> = (0..32).map(|_| f.view()).collect();
        let p = params("hisnr_f32", "default_rel");
        d.blob_log_batch(&views[..1], &p).unwrap();
        let t = std::time::Instant::now();
        let out = d.blob_log_batch(&views, &p).unwrap();
        let dt = t.elapsed().as_secs_f64();
        assert_eq!(out[0], blob_log_frame(views[0], &p).unwrap());
        eprintln!(
            "cuda: {:.2} ms per 512x512 frame (batch of 32, 10 scales)",
            dt * 1e3 / 32.0
        );
    }
}

/// The same checks again in a child process with every detection knob moved off its default
/// (odd work-group shapes, odd outputs per work-item, small prescale groups, traced kernels; on
/// CUDA also synchronous launches and every upload staged): results are independent of the
/// knobs.
#[test]
fn detections_do_not_depend_on_the_knobs() {
    let mut tests = Vec::new();
    if cfg!(feature = "opencl") {
        tests.extend([
            "opencl::opencl_cube_matches_fixtures_and_cpu",
            "opencl::opencl_detections_match_cpu_on_fixtures",
            "opencl::opencl_batch_equals_single_frames",
        ]);
    }
    if cfg!(feature = "cuda") {
        tests.extend([
            "cuda::cuda_cube_matches_fixtures_and_cpu",
            "cuda::cuda_detections_match_cpu",
            "cuda::cuda_batch_equals_single_frames",
        ]);
    }
    test_support::rerun_with_env(
        &[
            ("ARRAYBRIDGE_DETECT_WG_X", "32"),
            ("ARRAYBRIDGE_DETECT_WG_Y", "3"),
            ("ARRAYBRIDGE_DETECT_PREP_WG", "64"),
            ("ARRAYBRIDGE_DETECT_ROWS", "3"),
            ("ARRAYBRIDGE_DETECT_COLS", "5"),
            ("ARRAYBRIDGE_TRACE", "1"),
            ("ARRAYBRIDGE_CUDA_LAUNCH", "sync"),
            ("ARRAYBRIDGE_DIRECT_COPY_KB", "0"),
        ],
        &tests,
    );
}
