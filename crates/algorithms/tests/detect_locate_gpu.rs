#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Device `locate` (`detect::gpu`, kernels `detect::kernels::LOCATE`) against the CPU
//! implementation, on the fixtures the CPU tests use and on random frames of every pixel type
//! and many parameter sets.
//!
//! * OpenCL (PoCL in CI): skipped without an OpenCL device unless `ARRAYBRIDGE_REQUIRE_OPENCL=1`.
//! * CUDA: skipped without a GPU unless `ARRAYBRIDGE_REQUIRE_GPU=1`.
//! * The NVRTC compile check of the kernels is `detect_gpu::kernels_compile_with_nvrtc` (every
//!   source of `detect::kernels::ALL`).
//!
//! Float64 devices must give the CPU's features: same count and order, positions within 1e-9
//! px, every measure within 1e-9 relative (in practice bit for bit). The float32 path (devices
//! without doubles, forced here with `precision: Precision::F32`) is checked against a tolerance.
//!
//! Run: `cargo test -p algorithms --features opencl,cuda --test detect_locate_gpu -- --nocapture`.
#![cfg(any(feature = "opencl", feature = "cuda"))]

mod common;

mod open;

use algorithms::Precision;
use algorithms::detect::gpu::GpuDetectConfig;
use algorithms::detect::locate::locate;
use algorithms::detect::{DetectBackend, Feature, FrameView, LocateParams};
use common::{Frame, load_csv, load_npy};
use ndarray::{Array2, ArrayView2};
use test_support::env_flag;

// ------------------------------------------------------------------------------------------
// inputs

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
        let s = 1.0 + 1.5 * r.uniform();
        let a = 0.3 + 0.6 * r.uniform();
        for ((y, x), v) in img.indexed_iter_mut() {
            let d2 = (y as f64 - y0).powi(2) + (x as f64 - x0).powi(2);
            *v += a * (-d2 / (2.0 * s * s)).exp();
        }
    }
    img
}

/// The same random frame in the four pixel types.
fn typed(name: &str, img: &Array2<f64>) -> Vec<(String, Frame)> {
    let max = img.iter().fold(0.0f64, |m, v| m.max(*v));
    vec![
        (format!("{name} f32"), Frame::F32(img.mapv(|v| v as f32))),
        (format!("{name} f64"), Frame::F64(img.clone())),
        (
            format!("{name} u16"),
            Frame::U16(img.mapv(|v| (v / max * 60000.0).round() as u16)),
        ),
        (
            format!("{name} u8"),
            Frame::U8(img.mapv(|v| (v / max * 250.0).round() as u8)),
        ),
    ]
}

fn random_frames(seed: u64) -> Vec<(String, Frame)> {
    let mut out = Vec::new();
    for (k, &(h, w)) in [(64usize, 48usize), (37, 91), (96, 96), (15, 15), (9, 40)]
        .iter()
        .enumerate()
    {
        let s = seed + k as u64 * 101;
        let img = spots(h, w, (h * w / 120).max(2), s);
        out.extend(typed(&format!("{h}x{w}"), &img));
    }
    // white noise: many maxima, many duplicates
    let mut r = Rng(seed ^ 0xABCD);
    let noise = Array2::from_shape_fn((48, 64), |_| r.uniform());
    out.extend(typed("noise", &noise));
    // a constant frame: bandpass 0 everywhere, no feature
    out.push((
        "const u16".into(),
        Frame::U16(Array2::from_elem((32, 32), 700u16)),
    ));
    out.push((
        "const f32".into(),
        Frame::F32(Array2::from_elem((32, 32), 0.25f32)),
    ));
    // a flat frame with one bright pixel
    let mut one = Array2::from_elem((40, 40), 0u16);
    one[[20, 17]] = 5000;
    out.push(("one pixel u16".into(), Frame::U16(one)));
    out
}

fn random_params() -> Vec<(&'static str, LocateParams)> {
    let base = LocateParams::new(7);
    vec![
        ("d7", base.clone()),
        (
            "d5 minmass",
            LocateParams {
                minmass: 0.5,
                ..LocateParams::new(5)
            },
        ),
        ("d9", LocateParams::new(9)),
        ("d3", LocateParams::new(3)),
        (
            "invert",
            LocateParams {
                invert: true,
                ..base.clone()
            },
        ),
        (
            "no preprocess",
            LocateParams {
                preprocess: false,
                ..base.clone()
            },
        ),
        (
            "noise_size 0",
            LocateParams {
                noise_size: 0.0,
                ..base.clone()
            },
        ),
        (
            "noise_size 2.5 smoothing 11",
            LocateParams {
                noise_size: 2.5,
                smoothing_size: Some(11),
                ..base.clone()
            },
        ),
        (
            "smoothing 1",
            LocateParams {
                noise_size: 0.5,
                smoothing_size: Some(1),
                ..base.clone()
            },
        ),
        (
            "smoothing 35",
            LocateParams {
                smoothing_size: Some(35),
                ..LocateParams::new(5)
            },
        ),
        (
            "separation 3 percentile 20",
            LocateParams {
                separation: Some(3.0),
                percentile: 20.0,
                ..base.clone()
            },
        ),
        (
            "separation 12 percentile 95",
            LocateParams {
                separation: Some(12.0),
                percentile: 95.0,
                ..base.clone()
            },
        ),
        (
            "percentile 0 and 100",
            LocateParams {
                percentile: 0.0,
                ..base.clone()
            },
        ),
        (
            "percentile 100",
            LocateParams {
                percentile: 100.0,
                ..base.clone()
            },
        ),
        (
            "threshold",
            LocateParams {
                threshold: Some(0.02),
                ..base.clone()
            },
        ),
        (
            "topn maxsize",
            LocateParams {
                topn: Some(3),
                maxsize: Some(2.2),
                ..base.clone()
            },
        ),
        (
            "no characterize, 2 iterations",
            LocateParams {
                characterize: false,
                max_iterations: 2,
                ..base.clone()
            },
        ),
        (
            "0 iterations",
            LocateParams {
                max_iterations: 0,
                ..base
            },
        ),
    ]
}

// ------------------------------------------------------------------------------------------
// comparison

/// Worst differences between two feature lists of equal length: `[position (px), mass, size,
/// ecc, signal, raw_mass, ep]` (the measures relative).
fn worst(a: &[Feature], b: &[Feature]) -> [f64; 7] {
    let rel = |x: f64, y: f64| {
        if x == y || (x.is_nan() && y.is_nan()) {
            0.0
        } else {
            (x - y).abs() / y.abs().max(1e-12)
        }
    };
    let mut w = [0.0f64; 7];
    for (f, g) in a.iter().zip(b) {
        let d = [
            (f.y - g.y).abs().max((f.x - g.x).abs()),
            rel(f.mass, g.mass),
            rel(f.size, g.size),
            rel(f.ecc, g.ecc),
            rel(f.signal, g.signal),
            rel(f.raw_mass, g.raw_mass),
            rel(f.ep, g.ep),
        ];
        for (wk, dk) in w.iter_mut().zip(d) {
            *wk = if dk.is_nan() {
                f64::INFINITY
            } else {
                wk.max(dk)
            };
        }
    }
    w
}

/// Device features equal to the CPU's: same count, positions within `pos` px and measures
/// within `rel` relative. Returns the number of features and of bit-identical ones (every
/// column), and the worst differences.
fn assert_close(
    name: &str,
    dev: &[Feature],
    cpu: &[Feature],
    pos: f64,
    rel: f64,
) -> (usize, usize, [f64; 7]) {
    assert_eq!(
        dev.len(),
        cpu.len(),
        "{name}: feature count (device vs CPU)"
    );
    let w = worst(dev, cpu);
    assert!(w[0] <= pos, "{name}: positions differ by {:e} px", w[0]);
    for (k, c) in ["mass", "size", "ecc", "signal", "raw_mass", "ep"]
        .iter()
        .enumerate()
    {
        assert!(
            w[k + 1] <= rel,
            "{name}: {c} differs by {:e} relative",
            w[k + 1]
        );
    }
    let same = dev
        .iter()
        .zip(cpu)
        .filter(|(a, b)| {
            [a.y, a.x, a.mass, a.size, a.ecc, a.signal, a.raw_mass, a.ep]
                .iter()
                .zip([b.y, b.x, b.mass, b.size, b.ecc, b.signal, b.raw_mass, b.ep])
                .all(|(u, v)| u.to_bits() == v.to_bits())
        })
        .count();
    (dev.len(), same, w)
}

fn max7(a: [f64; 7], b: [f64; 7]) -> [f64; 7] {
    let mut o = a;
    for (x, y) in o.iter_mut().zip(b) {
        *x = x.max(y);
    }
    o
}

fn show(w: &[f64; 7]) -> String {
    format!(
        "worst |Δpos| {:.1e} px; relative mass {:.1e} size {:.1e} ecc {:.1e} signal {:.1e} raw_mass {:.1e} ep {:.1e}",
        w[0], w[1], w[2], w[3], w[4], w[5], w[6]
    )
}

/// The fixture runs of `tests/detect_locate.rs`: `(name, frames, params)`.
fn fixture_runs() -> Vec<(String, Vec<Frame>, LocateParams)> {
    let n = load_npy("blob_log/hisnr_u16.npy");
    let hisnr = Frame::U16(Array2::from_shape_vec((n.shape[0], n.shape[1]), n.u16s()).unwrap());
    let n = load_npy("blob_log/hisnr_f32.npy");
    let hisnr_f32 = Frame::F32(Array2::from_shape_vec((n.shape[0], n.shape[1]), n.f32s()).unwrap());
    let n = load_npy("movie/movie_u16.npy");
    let data = n.u16s();
    let (t, h, w) = (n.shape[0], n.shape[1], n.shape[2]);
    let movie: Vec<Frame> = (0..t)
        .map(|k| {
            Frame::U16(
                ArrayView2::from_shape((h, w), &data[k * h * w..(k + 1) * h * w])
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    let first = match &movie[0] {
        Frame::U16(a) => Frame::U16(a.clone()),
        _ => unreachable!(),
    };
    vec![
        (
            "hisnr_u16 d7".into(),
            vec![hisnr],
            LocateParams {
                minmass: 150.0,
                ..LocateParams::new(7)
            },
        ),
        (
            "hisnr_f32 d7".into(),
            vec![hisnr_f32],
            LocateParams {
                minmass: 150.0 / 161.0,
                ..LocateParams::new(7)
            },
        ),
        (
            "movie frame0 d9".into(),
            vec![first],
            LocateParams {
                minmass: 500.0,
                ..LocateParams::new(9)
            },
        ),
        (
            "movie d7 (all frames, one batch)".into(),
            movie,
            LocateParams {
                minmass: 300.0,
                ..LocateParams::new(7)
            },
        ),
    ]
}

/// The fixtures on `backend` against the CPU (and the movie against trackpy's CSV).
fn check_fixtures(name: &str, backend: &dyn DetectBackend, pos: f64, rel: f64) {
    let (mut n, mut same, mut wst) = (0, 0, [0.0; 7]);
    for (run, frames, p) in fixture_runs() {
        let views: Vec<FrameView<'_>> = frames.iter().map(Frame::view).collect();
        let dev = backend.locate_batch(&views, &p).unwrap();
        assert_eq!(dev.len(), views.len());
        let mut total = 0;
        for (k, (v, d)) in views.iter().zip(&dev).enumerate() {
            let cpu = locate(*v, &p).unwrap();
            let (a, b, w) = assert_close(&format!("[{name}] {run} frame {k}"), d, &cpu, pos, rel);
            n += a;
            same += b;
            wst = max7(wst, w);
            total += d.len();
        }
        if run.starts_with("movie d7") {
            assert_eq!(total, 732, "[{name}] trackpy's feature count");
            let golden = load_csv("movie/movie__locate_d7.csv");
            let gy = golden.f64col("y");
            let all: Vec<&Feature> = dev.iter().flatten().collect();
            for (f, y) in all.iter().zip(&gy) {
                assert!(
                    (f.y - y).abs() <= 1e-6 + pos,
                    "[{name}] trackpy y {} vs {y}",
                    f.y
                );
            }
        }
    }
    eprintln!(
        "[{name}] fixtures: {n} features, {same} bit-identical to the CPU; {}",
        show(&wst)
    );
}

/// `minmass` exactly at the CPU's own feature masses (every feature's, frame by frame of the
/// fixture movie and `hisnr_u16`, in batches): the feature at the threshold goes (`mass >
/// minmass`), one just above it stays, and the device (which reads back only the candidates
/// that can pass, `locate_keep`) finds the CPU's features bit for bit, duplicates removed as
/// trackpy does, in float64. Returns the number of (frame, threshold) cases.
fn check_minmass_edges(name: &str, backend: &dyn DetectBackend) -> usize {
    let mut cases = 0;
    for (run, frames, p) in fixture_runs() {
        if run.contains("f32") {
            continue;
        }
        let views: Vec<FrameView<'_>> = frames.iter().map(Frame::view).collect();
        // every mass the CPU finds with the run's own minmass halved, and its next double
        // down (the feature then passes): a few per frame, frames batched together
        let loose = LocateParams {
            minmass: p.minmass * 0.5,
            ..p.clone()
        };
        let mut thresholds: Vec<f64> = Vec::new();
        for v in views.iter().take(3) {
            let cpu = locate(*v, &loose).unwrap();
            for f in cpu.iter().step_by(cpu.len().div_ceil(4).max(1)) {
                thresholds.push(f.mass);
                thresholds.push(f64::from_bits(f.mass.to_bits() - 1));
            }
        }
        for minmass in thresholds {
            let q = LocateParams {
                minmass,
                ..p.clone()
            };
            let dev = backend.locate_batch(&views, &q).unwrap();
            for (k, (v, d)) in views.iter().zip(&dev).enumerate() {
                let cpu = locate(*v, &q).unwrap();
                let (n, same, _) = assert_close(
                    &format!("[{name}] {run} frame {k} minmass {minmass:e}"),
                    d,
                    &cpu,
                    0.0,
                    0.0,
                );
                assert_eq!(n, same, "[{name}] {run} frame {k}: bit for bit");
                cases += 1;
            }
        }
    }
    cases
}

/// Every random frame × parameter set, one frame at a time and all frames of a parameter set
/// in one batch call (runs of mixed shapes and types).
fn check_random(name: &str, backend: &dyn DetectBackend, pos: f64, rel: f64) -> (usize, usize) {
    let frames = random_frames(7);
    let (mut n, mut same, mut wst) = (0, 0, [0.0; 7]);
    for (pname, p) in random_params() {
        let views: Vec<FrameView<'_>> = frames.iter().map(|(_, f)| f.view()).collect();
        let batch = backend.locate_batch(&views, &p).unwrap();
        for ((fname, f), dev) in frames.iter().zip(&batch) {
            let cpu = locate(f.view(), &p).unwrap();
            let (a, b, w) =
                assert_close(&format!("[{name}] {fname} / {pname}"), dev, &cpu, pos, rel);
            n += a;
            same += b;
            wst = max7(wst, w);
        }
    }
    eprintln!(
        "[{name}] random: {n} features, {same} bit-identical to the CPU; {}",
        show(&wst)
    );
    assert!(n > 1000, "too few features to mean anything: {n}");
    (n, same)
}

/// The float32 path on the random frames: features are compared where the count agrees (a
/// maximum whose integer value sits at the percentile can come and go). Returns (frames
/// compared, frames whose count differs, features compared, features within 1e-5 px, within
/// 1e-3 px). Features of a few integer units (percentile 0, white noise) can refine to
/// another pixel when one value of the integer image changes by 1.
fn check_random_f32(name: &str, backend: &dyn DetectBackend) -> [usize; 5] {
    let frames = random_frames(7);
    let mut c = [0usize; 5];
    let mut far = 0.0f64;
    for (_, p) in random_params() {
        let views: Vec<FrameView<'_>> = frames.iter().map(|(_, f)| f.view()).collect();
        let batch = backend.locate_batch(&views, &p).unwrap();
        for ((_, f), dev) in frames.iter().zip(&batch) {
            let cpu = locate(f.view(), &p).unwrap();
            c[0] += 1;
            if dev.len() != cpu.len() {
                c[1] += 1;
                continue;
            }
            for (a, b) in dev.iter().zip(&cpu) {
                let d = (a.y - b.y).abs().max((a.x - b.x).abs());
                c[2] += 1;
                c[3] += usize::from(d <= 1e-5);
                c[4] += usize::from(d <= 1e-3);
                far = far.max(d);
            }
        }
    }
    eprintln!(
        "[{name}] random: {} frames, {} with another feature count; {} features compared: {} \
         within 1e-5 px, {} within 1e-3 px, worst {far:.2} px",
        c[0], c[1], c[2], c[3], c[4]
    );
    c
}

/// A batch equals its frames one by one (sub-batches of one frame too).
fn check_batch(name: &str, backend: &dyn DetectBackend, small: &dyn DetectBackend) {
    let mut frames = Vec::new();
    for k in 0..5 {
        frames.push(Frame::U16(
            spots(70, 60, 30, 900 + k).mapv(|v| (v * 20000.0) as u16),
        ));
    }
    let views: Vec<FrameView<'_>> = frames.iter().map(Frame::view).collect();
    let p = LocateParams::new(7);
    let all = backend.locate_batch(&views, &p).unwrap();
    let split = small.locate_batch(&views, &p).unwrap();
    assert_eq!(all, split, "[{name}] sub-batches of one frame");
    for (v, a) in views.iter().zip(&all) {
        assert_eq!(
            &backend.locate_batch(&[*v], &p).unwrap()[0],
            a,
            "[{name}] one frame"
        );
    }
    eprintln!(
        "[{name}] batch of {} == one by one ({} features)",
        views.len(),
        all.iter().map(Vec::len).sum::<usize>()
    );
}

/// Bad input: the CPU's errors, nothing launched.
fn check_errors(backend: &dyn DetectBackend) {
    let a = Array2::<u16>::zeros((32, 32));
    let err = backend
        .locate_batch(&[FrameView::U16(a.view())], &LocateParams::new(8))
        .unwrap_err();
    assert!(err.to_string().contains("diameter"), "{err}");
    let mut nan = Array2::<f32>::zeros((32, 32));
    nan[[3, 4]] = f32::NAN;
    let err = backend
        .locate_batch(&[FrameView::F32(nan.view())], &LocateParams::new(7))
        .unwrap_err();
    assert!(err.to_string().contains("NaN"), "{err}");
    // too small for the margin: no feature, as on the CPU
    let tiny = Array2::<u16>::from_elem((6, 6), 9);
    assert!(
        backend
            .locate_batch(&[FrameView::U16(tiny.view())], &LocateParams::new(7))
            .unwrap()[0]
            .is_empty()
    );
    assert!(
        backend
            .locate_batch(&[], &LocateParams::new(7))
            .unwrap()
            .is_empty()
    );
}

/// Timing on 512×512 u16 frames (reported, not asserted): batches of 8, device vs CPU.
/// `d` with `ARRAYBRIDGE_LOCATE_NOISE` at `mode`, set by value.
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn noise_mode<E: bridge_core::exec::Executor>(
    d: &algorithms::detect::gpu::GpuDetect<E>,
    mode: &str,
) -> algorithms::detect::gpu::GpuDetect<E> {
    d.clone().with_config(GpuDetectConfig {
        tuning: bridge_core::tuning::Tuning::default()
            .with("ARRAYBRIDGE_LOCATE_NOISE", mode)
            .unwrap(),
        ..d.config().clone()
    })
}

/// The background noise summed a row a work item (`rows`) and through local memory by tiles of
/// 32 rows (`tiles`: frames whose sides are not multiples of 32 included) gives the CPU's
/// features bit for bit either way.
#[cfg(any(feature = "opencl", feature = "cuda"))]
fn check_noise_modes<E: bridge_core::exec::Executor>(
    name: &str,
    d: &algorithms::detect::gpu::GpuDetect<E>,
) {
    for mode in ["tiles", "rows"] {
        let m = noise_mode(d, mode);
        let label = format!("{name} noise {mode}");
        check_fixtures(&label, &m, 1e-9, 1e-9);
        let (n, same) = check_random(&label, &m, 1e-9, 1e-9);
        assert_eq!(n, same, "{label}: the CPU's features bit for bit");
    }
}

fn time_512(name: &str, backend: &dyn DetectBackend, frames: usize) {
    let s = algorithms::detect::synth::synthetic_movie(frames, 512, 100, 1.0, 3);
    let movie = s.movie;
    let views = movie.frames();
    let p = LocateParams {
        minmass: 200.0,
        ..LocateParams::new(7)
    };
    backend.locate_batch(&views[..1], &p).unwrap(); // build the program
    let t = std::time::Instant::now();
    let dev = backend.locate_batch(&views, &p).unwrap();
    let dt = t.elapsed().as_secs_f64();
    let kt = backend.last_kernel_seconds().unwrap_or(f64::NAN);
    let t = std::time::Instant::now();
    let cpu: Vec<Vec<Feature>> = views.iter().map(|v| locate(*v, &p).unwrap()).collect();
    let dc = t.elapsed().as_secs_f64();
    assert_eq!(dev, cpu);
    eprintln!(
        "[{name}] locate 512x512 u16 d7: {:.2} ms per frame (batch of {frames}; kernels {:.2} ms); CPU locate {:.2} ms per frame; {} features per frame",
        dt * 1e3 / frames as f64,
        kt * 1e3 / frames as f64,
        dc * 1e3 / frames as f64,
        dev[0].len()
    );
}

// ------------------------------------------------------------------------------------------
// OpenCL

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

    fn f32_path(d: &OpenClDetect) -> OpenClDetect {
        d.clone().with_config(GpuDetectConfig {
            precision: Precision::F32,
            ..GpuDetectConfig::default()
        })
    }

    #[test]
    fn opencl_locate_matches_cpu_on_fixtures() {
        let Some(d) = device() else { return };
        assert!(d.has_fp64(), "PoCL has doubles");
        check_fixtures("opencl f64", &d, 1e-9, 1e-9);
    }

    #[test]
    fn opencl_locate_noise_modes_give_the_cpus_features() {
        let Some(d) = device() else { return };
        check_noise_modes("opencl f64", &d);
    }

    #[test]
    fn opencl_locate_minmass_at_the_features_masses() {
        let Some(d) = device() else { return };
        let cases = check_minmass_edges("opencl f64", &d);
        assert!(cases > 100, "{cases} cases");
    }

    #[test]
    fn opencl_locate_matches_cpu_on_random_frames() {
        let Some(d) = device() else { return };
        let (n, same) = check_random("opencl f64", &d, 1e-9, 1e-9);
        assert_eq!(n, same, "float64 device features are the CPU's bit for bit");
    }

    /// The float32 path (devices without doubles), forced on PoCL.
    #[test]
    fn opencl_locate_f32_within_tolerance() {
        let Some(d) = device() else { return };
        check_fixtures("opencl f32", &f32_path(&d), 1e-4, 1e-4);
        let c = check_random_f32("opencl f32", &f32_path(&d));
        assert!(
            c[1] * 20 <= c[0],
            "{} of {} frames changed their feature count",
            c[1],
            c[0]
        );
        assert!(
            c[4] * 100 >= c[2] * 99,
            "99 % of the features within 1e-3 px"
        );
    }

    #[test]
    fn opencl_locate_batch_equals_single_frames() {
        let Some(d) = device() else { return };
        let small = d.clone().with_config(GpuDetectConfig {
            max_device_bytes: 1,
            ..GpuDetectConfig::default()
        });
        check_batch("opencl", &d, &small);
    }

    /// `locate_batches` with 1, 2 and 3 batches in flight (`ARRAYBRIDGE_DETECT_IN_FLIGHT` set
    /// by value), batches of 2 frames (a partial last one), u16 and f32 frames: the CPU's
    /// features, every bit; progress in order; the kernel time counted once (the device's
    /// account of each sub-batch taken while it holds the device).
    #[test]
    fn opencl_locate_batches_in_flight_give_the_cpus_features() {
        use algorithms::detect::{CpuBackend, locate_batches};
        use bridge_core::tuning::Tuning;
        let Some(d) = device() else { return };
        let mut frames = Vec::new();
        for k in 0..9u64 {
            let img = spots(72, 66, 25, 40 + k);
            frames.push(if k % 3 == 2 {
                Frame::F32(img.mapv(|v| (v * 300.0) as f32))
            } else {
                Frame::U16(img.mapv(|v| (v * 20000.0) as u16))
            });
        }
        let views: Vec<FrameView<'_>> = frames.iter().map(Frame::view).collect();
        let p = LocateParams::new(7);
        let cpu = locate_batches(&views, &p, 2, &CpuBackend::default(), |_| {}).unwrap();
        assert!(cpu.iter().map(Vec::len).sum::<usize>() > 50);
        for n in ["1", "2", "3"] {
            let b = d.clone().with_config(GpuDetectConfig {
                tuning: Tuning::default()
                    .with("ARRAYBRIDGE_DETECT_IN_FLIGHT", n)
                    .unwrap(),
                ..d.config().clone()
            });
            let mut seen = Vec::new();
            let k0 = b.kernel_seconds_total().unwrap();
            let dev = locate_batches(&views, &p, 2, &b, |f| seen.push(f)).unwrap();
            let k = b.kernel_seconds_total().unwrap() - k0;
            assert_eq!(dev, cpu, "{n} in flight");
            assert_eq!(seen, vec![2, 4, 6, 8, 9], "{n} in flight");
            assert!(k > 0.0, "{n} in flight: kernel time {k}");
        }
        let err = locate_batches(&views, &p, 0, &d, |_| {}).unwrap_err();
        assert!(err.to_string().contains("batch_size"), "{err}");
    }

    #[test]
    fn opencl_locate_errors_and_dispatch() {
        let Some(d) = device() else { return };
        check_errors(&d);
        let b = open::detect_backend(bridge_core::Device::OpenCl(0)).unwrap();
        assert_eq!(b.device(), bridge_core::Device::OpenCl(0));
        let f = Frame::U16(spots(64, 64, 20, 3).mapv(|v| (v * 1000.0) as u16));
        let feats = b.locate_batch(&[f.view()], &LocateParams::new(7)).unwrap();
        assert_eq!(feats[0], locate(f.view(), &LocateParams::new(7)).unwrap());
        assert!(
            b.last_kernel_seconds().unwrap() > 0.0,
            "kernels ran on the device"
        );
    }

    #[test]
    fn opencl_locate_time_per_512_frame() {
        let Some(d) = device() else { return };
        time_512("opencl", &d, 8);
    }
}

// ------------------------------------------------------------------------------------------
// CUDA

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use algorithms::detect::gpu::CudaDetect;

    fn device() -> Option<CudaDetect> {
        match algorithms::exec::CudaExecutor::new(0).map(CudaDetect::with_executor) {
            Ok(d) => Some(d),
            Err(e) => {
                if env_flag("ARRAYBRIDGE_REQUIRE_GPU") {
                    panic!("ARRAYBRIDGE_REQUIRE_GPU=1 but no CUDA device: {e}");
                }
                eprintln!("skipping: no CUDA device ({e})");
                None
            }
        }
    }

    #[test]
    fn cuda_locate_matches_cpu() {
        let Some(d) = device() else { return };
        check_fixtures("cuda f64", &d, 1e-9, 1e-9);
        let (n, same) = check_random("cuda f64", &d, 1e-9, 1e-9);
        assert_eq!(n, same, "float64 device features are the CPU's bit for bit");
        check_errors(&d);
        assert!(check_minmass_edges("cuda f64", &d) > 100);
    }

    #[test]
    fn cuda_locate_noise_modes_give_the_cpus_features() {
        let Some(d) = device() else { return };
        check_noise_modes("cuda f64", &d);
    }

    #[test]
    fn cuda_locate_f32_within_tolerance() {
        let Some(d) = device() else { return };
        let f = d.clone().with_config(GpuDetectConfig {
            precision: Precision::F32,
            ..GpuDetectConfig::default()
        });
        check_fixtures("cuda f32", &f, 1e-4, 1e-4);
        let c = check_random_f32("cuda f32", &f);
        assert!(
            c[1] * 20 <= c[0],
            "{} of {} frames changed their feature count",
            c[1],
            c[0]
        );
        assert!(
            c[4] * 100 >= c[2] * 99,
            "99 % of the features within 1e-3 px"
        );
    }

    #[test]
    fn cuda_locate_batch_equals_single_frames() {
        let Some(d) = device() else { return };
        let small = d.clone().with_config(GpuDetectConfig {
            max_device_bytes: 1,
            ..GpuDetectConfig::default()
        });
        check_batch("cuda", &d, &small);
    }

    #[test]
    fn cuda_locate_time_per_512_frame() {
        let Some(d) = device() else { return };
        time_512("cuda", &d, 64);
    }
}

/// The same checks again in a child process with every detection knob moved off its default
/// (odd work-group shapes, small load groups, traced kernels, the rows' boxcar a work item per
/// row; on CUDA also synchronous launches, every upload staged and behind the kernels): results
/// are independent of the knobs (the candidates all read back, the noise a row a work item).
#[test]
fn locate_does_not_depend_on_the_knobs() {
    let mut tests = Vec::new();
    if cfg!(feature = "opencl") {
        tests.extend([
            "opencl::opencl_locate_matches_cpu_on_fixtures",
            "opencl::opencl_locate_matches_cpu_on_random_frames",
            "opencl::opencl_locate_batch_equals_single_frames",
            "opencl::opencl_locate_minmass_at_the_features_masses",
        ]);
    }
    if cfg!(feature = "cuda") {
        tests.extend([
            "cuda::cuda_locate_matches_cpu",
            "cuda::cuda_locate_batch_equals_single_frames",
        ]);
    }
    test_support::rerun_with_env(
        &[
            ("ARRAYBRIDGE_DETECT_WG_X", "32"),
            ("ARRAYBRIDGE_DETECT_WG_Y", "3"),
            ("ARRAYBRIDGE_DETECT_PREP_WG", "64"),
            ("ARRAYBRIDGE_TRACE", "1"),
            ("ARRAYBRIDGE_CUDA_LAUNCH", "sync"),
            ("ARRAYBRIDGE_DIRECT_COPY_KB", "0"),
            ("ARRAYBRIDGE_CUDA_UPLOAD", "shared"),
            // the rows' boxcar one work item per row, as before
            ("ARRAYBRIDGE_LOCATE_ROWS", "line"),
            ("ARRAYBRIDGE_LOCATE_KEEP", "0"),
            // the noise a row a work item, as before
            ("ARRAYBRIDGE_LOCATE_NOISE", "rows"),
        ],
        &tests,
    );
}
