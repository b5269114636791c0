//! The movie-level `LogDetector`, device dispatch and sub-pixel refinement.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod open;

use algorithms::detect::blob_log::{BlobLogParams, blob_log_frame};
use algorithms::detect::{FrameView, LogDetector, Movie, RefineParams, refine_blobs};
use bridge_core::{BridgeError, Device};
use common::{load_csv, load_npy};
use ndarray::{Array2, Array3};

fn movie() -> Movie {
    let n = load_npy("movie/movie_u16.npy");
    Movie::U16(Array3::from_shape_vec((n.shape[0], n.shape[1], n.shape[2]), n.u16s()).unwrap())
}

#[test]
fn detector_matches_blob_log_for_every_batch_size() {
    let m = movie();
    let golden = load_csv("movie/movie__blob_log_default_rel.csv");
    let (gf, gy, gx) = (
        golden.f64col("frame"),
        golden.f64col("y"),
        golden.f64col("x"),
    );
    for bs in [1, 3, 8, 64] {
        let det = LogDetector {
            batch_size: bs,
            ..Default::default()
        };
        let ps = det.detect_movie(&m, &open::cpu()).unwrap();
        assert_eq!(ps.len(), gy.len(), "batch size {bs}");
        for (i, p) in ps.iter().enumerate() {
            assert_eq!(
                (f64::from(p.frame), p.y, p.x),
                (gf[i], gy[i], gx[i]),
                "batch {bs} row {i}"
            );
            assert!(p.snr.is_finite() && p.snr > 0.0);
            assert_eq!(p.frame_size, (256, 256));
        }
    }
}

/// A GPU device either runs and agrees with the CPU, or is a typed `BackendUnavailable` error
/// (feature compiled out, library or device missing) — never a silent CPU run.
#[test]
fn gpu_devices_agree_with_cpu_or_report_unavailable() {
    let m = movie();
    let det = LogDetector::default();
    let cpu = det.detect_movie(&m, &open::cpu()).unwrap();
    for d in [Device::Cuda(0), Device::OpenCl(0)] {
        match open::try_open(d).and_then(|h| det.detect_movie(&m, &h)) {
            Ok(on_device) => {
                assert_eq!(on_device.len(), cpu.len(), "{d}");
                for (a, b) in on_device.iter().zip(&cpu) {
                    assert_eq!(
                        (a.frame, a.y, a.x, a.sigma),
                        (b.frame, b.y, b.x, b.sigma),
                        "{d}"
                    );
                }
            }
            Err(BridgeError::BackendUnavailable { .. }) => {}
            Err(other) => panic!("{d}: {other:?}"),
        }
    }
    assert!(det.detect_movie(&m, &open::open(Device::TorchCpu)).is_err());
}

#[test]
fn detector_errors() {
    let empty = Movie::F32(Array3::zeros((0, 16, 16)));
    assert!(
        LogDetector::default()
            .detect_movie(&empty, &open::cpu())
            .is_err()
    );
    let nan = Movie::F32(Array3::from_elem((2, 16, 16), f32::NAN));
    assert!(matches!(
        LogDetector::default().detect_movie(&nan, &open::cpu()),
        Err(BridgeError::InvalidInput(_))
    ));
    let det = LogDetector {
        batch_size: 0,
        ..Default::default()
    };
    assert!(det.detect_movie(&movie(), &open::cpu()).is_err());
    // finite pixels so large that the scale space would overflow (a NaN cube's maxima differ
    // between the AVX2 and the generic code): refused, whatever the back end
    let mut huge = Array3::<f64>::zeros((1, 32, 32));
    huge[[0, 10, 10]] = 1e308;
    huge[[0, 12, 12]] = -1e308;
    let none = LogDetector {
        params: BlobLogParams {
            prescale: algorithms::detect::Prescale::None,
            ..BlobLogParams::seed()
        },
        ..Default::default()
    };
    let err = none.detect_movie(&Movie::F64(huge.clone()), &open::cpu());
    assert!(
        matches!(&err, Err(BridgeError::InvalidInput(m)) if m.contains("overflow")),
        "{err:?}"
    );
    // minmax maps them into [0, 1]: fine
    assert!(
        LogDetector {
            params: BlobLogParams {
                prescale: algorithms::detect::Prescale::MinMax,
                ..BlobLogParams::seed()
            },
            ..Default::default()
        }
        .detect_movie(&Movie::F64(huge), &open::cpu())
        .is_ok()
    );
    let mut big32 = Array3::<f32>::zeros((1, 32, 32));
    big32[[0, 3, 3]] = 1e38;
    assert!(matches!(
        none.detect_movie(&Movie::F32(big32.clone()), &open::cpu()),
        Err(BridgeError::InvalidInput(_))
    ));
    big32[[0, 3, 3]] = 1e30;
    assert!(
        none.detect_movie(&Movie::F32(big32.clone()), &open::cpu())
            .is_ok()
    );
    // ... but not with a small sigma, whose second-derivative taps grow as 1/σ²
    let small = LogDetector {
        params: BlobLogParams {
            min_sigma: 0.0001,
            ..none.params.clone()
        },
        ..none.clone()
    };
    assert!(
        small
            .detect_movie(&Movie::F32(big32), &open::cpu())
            .is_err()
    );
    // a tiny range prescale multiplies integer pixels too
    let tiny = LogDetector {
        params: BlobLogParams {
            prescale: algorithms::detect::Prescale::Range(0.0, 1e-305),
            ..BlobLogParams::seed()
        },
        ..Default::default()
    };
    assert!(tiny.detect_movie(&movie(), &open::cpu()).is_err());
    // 1e200 is fine in float64 on the CPU and on a device with doubles (the default keeps the
    // CPU's working type there), not in a float32 scale space (`--fast`, or no doubles)
    let mut big = Array3::<f64>::zeros((1, 32, 32));
    big[[0, 10, 10]] = 1e200;
    let big = Movie::F64(big);
    let on_cpu = none.detect_movie(&big, &open::cpu()).unwrap();
    #[cfg(feature = "opencl")]
    if let Ok(b) = open::detect_backend(Device::OpenCl(0)) {
        let float32 = |r: &bridge_core::Result<_>| matches!(r, Err(BridgeError::InvalidInput(m)) if m.contains("float32"));
        let default = none.detect_movie_with(&big, b.as_ref(), |_| {});
        assert!(
            default.as_ref().is_ok_and(|ps| *ps == on_cpu) || float32(&default),
            "{default:?}"
        );
        let fast = LogDetector {
            precision: algorithms::Precision::F32,
            ..none.clone()
        };
        let err = fast.detect_movie_with(&big, b.as_ref(), |_| {});
        assert!(float32(&err), "{err:?}");
    }
}

/// Refinement beats the integer-pixel floor (0.41 px) on the high-SNR frame.
#[test]
fn refinement_improves_localisation() {
    let n = load_npy("blob_log/hisnr_u16.npy");
    let a = Array2::from_shape_vec((n.shape[0], n.shape[1]), n.u16s()).unwrap();
    let f = FrameView::U16(a.view());
    let p = BlobLogParams {
        max_sigma: 3.0,
        threshold: Some(0.00012),
        ..Default::default()
    };
    let blobs = blob_log_frame(f, &p).unwrap();
    let refined = refine_blobs(f, &blobs, &RefineParams::default()).unwrap();
    let truth = load_csv("blob_log/hisnr_truth.csv");
    let (ty, tx) = (truth.f64col("y"), truth.f64col("x"));
    let (mut se_int, mut se_ref, mut n_match) = (0.0, 0.0, 0);
    for (b, r) in blobs.iter().zip(&refined) {
        let best = ty
            .iter()
            .zip(&tx)
            .map(|(y, x)| ((y - b.y).powi(2) + (x - b.x).powi(2), *y, *x))
            .min_by(|a, b| a.0.partial_cmp(&b.0).unwrap())
            .unwrap();
        if best.0 <= 4.0 {
            n_match += 1;
            se_int += best.0;
            se_ref += (r.y - best.1).powi(2) + (r.x - best.2).powi(2);
            assert!(r.mass > 0.0 && r.size > 0.5 && r.size < 5.0 && r.ecc >= 0.0);
        }
    }
    let (rmse_int, rmse_ref) = (
        (se_int / n_match as f64).sqrt(),
        (se_ref / n_match as f64).sqrt(),
    );
    eprintln!(
        "hisnr_u16: {n_match} matched; RMSE integer {rmse_int:.3} px, refined {rmse_ref:.3} px"
    );
    assert!(n_match >= 95);
    assert!(rmse_ref < 0.3 && rmse_ref < rmse_int);
}

/// The synthetic benchmark movie (spec §6 model): LoG, refined LoG and locate against truth.
#[test]
fn synthetic_movie_recall_precision() {
    use algorithms::detect::locate::{LocateParams, locate};
    use algorithms::detect::synth::{match_truth, synthetic_movie};
    let s = synthetic_movie(4, 256, 40, 1.0, 3);
    assert_eq!(s.movie.dim(), (4, 256, 256));
    let det = LogDetector {
        refine: Some(RefineParams::default()),
        batch_size: 2,
        ..Default::default()
    };
    let ps = det.detect_movie(&s.movie, &open::cpu()).unwrap();
    let int: Vec<(u32, f64, f64)> = ps.iter().map(|p| (p.frame, p.y, p.x)).collect();
    let refd: Vec<(u32, f64, f64)> = ps
        .iter()
        .map(|p| {
            let r = p.refined.unwrap();
            (p.frame, r.y, r.x)
        })
        .collect();
    let a = match_truth(&int, &s.truth, 2.0);
    let b = match_truth(&refd, &s.truth, 2.0);
    eprintln!("LoG: {a:?}\nrefined: {b:?}");
    assert!(a.recall >= 0.97 && a.precision >= 0.97);
    assert!(b.rmse < a.rmse && b.rmse < 0.3);
    let mut loc = Vec::new();
    for t in 0..4 {
        let f = s.movie.frame(t).unwrap();
        for ft in locate(
            f,
            &LocateParams {
                minmass: 200.0,
                ..LocateParams::new(7)
            },
        )
        .unwrap()
        {
            loc.push((t as u32, ft.y, ft.x));
        }
    }
    let c = match_truth(&loc, &s.truth, 2.0);
    eprintln!("locate: {c:?}");
    assert!(c.recall >= 0.95 && c.precision >= 0.97 && c.rmse < 0.3);
}

/// Detect then link the synthetic movie: almost every truth particle gets one full track.
#[test]
fn detect_then_link_particles() {
    use algorithms::track::{LinkParams, link_particles};
    let s = algorithms::detect::synth::synthetic_movie(10, 256, 30, 1.0, 5);
    let det = LogDetector {
        refine: Some(RefineParams::default()),
        ..Default::default()
    };
    let mut ps = det.detect_movie(&s.movie, &open::cpu()).unwrap();
    let stats = link_particles(&mut ps, &LinkParams::new(5.0, 1)).unwrap();
    assert!(ps.iter().all(|p| p.id.is_some()));
    eprintln!("{stats:?}");
    let mut len = std::collections::HashMap::new();
    for p in &ps {
        *len.entry(p.id.unwrap()).or_insert(0usize) += 1;
    }
    let full = len.values().filter(|&&n| n == 10).count();
    assert!(
        stats.tracks <= 33 && full >= 27,
        "{} tracks, {full} full-length",
        stats.tracks
    );
}

#[test]
fn benchmark_rows() {
    use algorithms::detect::CpuBackend;
    use algorithms::detect::synth::{benchmark_detect, synthetic_movie};
    let s = synthetic_movie(4, 128, 10, 1.0, 9);
    let rows = benchmark_detect(
        &s,
        &LogDetector::default(),
        &CpuBackend::default(),
        &[1, 2, 4],
    )
    .unwrap();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r.frames, 4);
        assert!(r.frames_per_s > 0.0 && r.kernel_s.is_none());
        assert!(r.score.recall >= 0.9, "{r:?}");
    }
    assert_eq!(rows[0].detections, rows[2].detections);
}

/// The CPU back end's knobs are set by value (no environment, no child process): the certified
/// search on or off, each kernel set and any band height give the same blobs, bit for bit, on
/// u16, f32 and f64 frames of a synthetic movie.
#[test]
fn cpu_knobs_set_by_value_change_no_blob() {
    use algorithms::detect::blob_log::{CpuKnobs, FusedKernels, Precision};
    use algorithms::detect::{CpuBackend, DetectBackend};
    let synth = algorithms::detect::synth::synthetic_movie(3, 96, 12, 1.0, 21);
    let Movie::U16(m) = &synth.movie else {
        panic!("u16 movie")
    };
    let f32s = m.mapv(|v| f32::from(v) / 65535.0);
    let f64s = m.mapv(|v| f64::from(v) / 50_000.0 + 0.125);
    let variants = [
        CpuKnobs {
            certified: false,
            ..CpuKnobs::default()
        },
        CpuKnobs {
            fused: FusedKernels::Exact,
            ..CpuKnobs::default()
        },
        CpuKnobs {
            fused: FusedKernels::Eight,
            ..CpuKnobs::default()
        },
        CpuKnobs {
            band_rows: Some(1),
            ..CpuKnobs::default()
        },
        CpuKnobs {
            band_rows: Some(13),
            certified: false,
            ..CpuKnobs::default()
        },
    ];
    for p in [
        BlobLogParams {
            max_sigma: 4.0,
            threshold: Some(0.0004),
            ..Default::default()
        },
        BlobLogParams {
            max_sigma: 6.0,
            num_sigma: 7,
            threshold: None,
            threshold_rel: Some(0.2),
            ..Default::default()
        },
    ] {
        for i in 0..m.shape()[0] {
            let frames = [
                FrameView::U16(m.index_axis(ndarray::Axis(0), i)),
                FrameView::F32(f32s.index_axis(ndarray::Axis(0), i)),
                FrameView::F64(f64s.index_axis(ndarray::Axis(0), i)),
            ];
            let want = CpuBackend::with_knobs(CpuKnobs::default())
                .blob_log_batch_acc(&frames, &p, Precision::F64)
                .unwrap();
            let counts: Vec<usize> = want.iter().map(Vec::len).collect();
            assert!(counts.iter().all(|&n| n > 0), "frame {i}: {counts:?} {p:?}");
            for k in &variants {
                let got = CpuBackend::with_knobs(*k)
                    .blob_log_batch_acc(&frames, &p, Precision::F64)
                    .unwrap();
                assert_eq!(got, want, "frame {i}: {k:?} {p:?}");
            }
        }
    }
}

/// `detect_stream` over chunks of a movie gives the particles of the whole movie, with frame
/// numbers counted across chunks.
#[test]
fn streamed_chunks_equal_the_whole_movie() {
    use algorithms::detect::{CpuBackend, LogDetector, Movie};
    let synth = algorithms::detect::synth::synthetic_movie(7, 64, 6, 1.0, 5);
    let Movie::U16(m) = &synth.movie else {
        panic!("u16 movie")
    };
    let det = LogDetector::default();
    let whole = det
        .detect_movie_with(&synth.movie, &CpuBackend::default(), |_| {})
        .unwrap();
    let chunks: Vec<bridge_core::Result<Movie>> = [0..3, 3..5, 5..7]
        .into_iter()
        .map(|r| Ok(Movie::U16(m.slice(ndarray::s![r, .., ..]).to_owned())))
        .collect();
    let streamed: Vec<_> = det
        .detect_stream(chunks, &CpuBackend::default())
        .collect::<bridge_core::Result<Vec<_>>>()
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert!(!whole.is_empty());
    assert_eq!(streamed, whole);
    // An error in a chunk is reported, not skipped.
    let bad = vec![Err(bridge_core::BridgeError::InvalidInput("boom".into()))];
    assert!(
        det.detect_stream(bad, &CpuBackend::default())
            .any(|r| r.is_err())
    );
}

/// An input error about some frames of a movie names them as data: the frame itself (since
/// 2026-11-28; the whole batch before) counted in the movie, and in a chunk of a movie counted
/// from the movie's first frame.
#[test]
fn input_errors_carry_their_frames() {
    let mut m = Array3::<f64>::zeros((6, 32, 32));
    m[[4, 10, 10]] = 1e308;
    m[[4, 12, 12]] = -1e308;
    let det = LogDetector {
        params: BlobLogParams {
            prescale: algorithms::detect::Prescale::None,
            ..BlobLogParams::seed()
        },
        batch_size: 2,
        ..Default::default()
    };
    let Err(BridgeError::InvalidInput(e)) = det.detect_movie(&Movie::F64(m.clone()), &open::cpu())
    else {
        panic!("an overflowing frame is an input error");
    };
    assert_eq!(e.frames, Some(4..5), "{e}");
    assert!(e.to_string().starts_with("in frames 4..5: "), "{e}");
    assert!(e.contains("overflow"), "the message reads as itself: {e}");
    // in a stream, the second chunk's frame 4 is the movie's 7
    let clean = Movie::F64(Array3::from_shape_fn((3, 32, 32), |(t, y, x)| {
        ((t * 7 + y * 3 + x) % 11) as f64
    }));
    let chunks = vec![Ok(clean), Ok(Movie::F64(m))];
    let cpu = algorithms::detect::CpuBackend::default();
    let out: Vec<_> = det.detect_stream(chunks, &cpu).collect();
    assert!(out[0].is_ok());
    let Err(BridgeError::InvalidInput(s)) = &out[1] else {
        panic!("still an input error: {:?}", out[1]);
    };
    assert_eq!(s.frames, Some(7..8), "{s}");
}
