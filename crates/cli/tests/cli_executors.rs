//! One executor per device per process: a `detect` run (several chunks, both methods, then a
//! `paco` run) opens the device's executor once, however many back ends, chunks and stages use
//! it. The commands run in this test's own process ([`arraybridge_cli::run`]), so the device's
//! counter sees everything they did.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use arraybridge::Device;
use arraybridge_cli::{Cli, run};
use clap::Parser;

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ab-executors-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cli(args: &[&str]) {
    let args = std::iter::once("arraybridge").chain(args.iter().copied());
    run(Cli::try_parse_from(args).unwrap()).unwrap();
}

/// Runs `detect` twice (`log` and `locate`, 3 frames a chunk) and `paco` on `device`.
fn run_commands(device: &str, out: &std::path::Path) {
    let movie = test_support::fixtures::path("detect/movie/movie_u16.npy");
    for method in ["log", "locate"] {
        let csv = out.join(format!("{method}.csv"));
        let mut args = vec![
            "-q",
            "detect",
            movie.to_str().unwrap(),
            "-o",
            csv.to_str().unwrap(),
            "--device",
            device,
            "--method",
            method,
            "--chunk-frames",
            "3",
        ];
        // `--diameter` is `locate`'s (the LoG refuses it)
        if method == "locate" {
            args.extend(["--diameter", "7"]);
        }
        cli(&args);
        assert!(csv.is_file());
    }
    let pc = test_support::fixtures::path("paco");
    let fits = |name: &str| pc.join(format!("synth_adi40_64_{name}.fits"));
    let (cube, angles, psf) = (fits("cube"), fits("angles"), fits("psf"));
    let maps = out.join("paco");
    cli(&[
        "-q",
        "paco",
        "--cube",
        cube.to_str().unwrap(),
        "--angles",
        angles.to_str().unwrap(),
        "--psf",
        psf.to_str().unwrap(),
        "--fwhm",
        "4",
        "--device",
        device,
        "-o",
        maps.to_str().unwrap(),
    ]);
    assert!(maps.exists());
}

#[test]
fn opencl_detect_opens_one_executor() {
    let Some(dev) = test_support::device_or_skip(arraybridge::registry(), Device::OpenCl(0)) else {
        return;
    };
    let cl = arraybridge::registry()
        .backend_of::<arraybridge::bridge_opencl::OpenClBackend>()
        .expect("the registry holds the OpenCL back end");
    assert_eq!(cl.executors_created(dev), 0, "nothing ran yet");
    let out = tmp("opencl");
    // one upload of each chunk's pixels: the movie (20 frames of 256×256 u16) crosses once,
    // plus each chunk's few bytes of parameters and coefficients
    let movie = test_support::fixtures::path("detect/movie/movie_u16.npy");
    let csv = out.join("uploads.csv");
    let before = cl.executor_uploads(dev);
    let bulk_before = cl.executor_bulk_uploads(dev);
    cli(&[
        "-q",
        "detect",
        movie.to_str().unwrap(),
        "-o",
        csv.to_str().unwrap(),
        "--device",
        "opencl:0",
        "--chunk-frames",
        "3",
    ]);
    let after = cl.executor_uploads(dev);
    let (calls, bytes) = (after.0 - before.0, after.1 - before.1);
    eprintln!("uploads: {calls} calls, {bytes} bytes");
    // chunks: the first is one frame (the stream reads it before it knows a frame's size, for
    // its byte bound), then 3 frames each: 1 + 6 × 3 + 1
    let (movie_bytes, chunks) = (20 * 256 * 256 * 2, 8);
    assert!(
        bytes >= movie_bytes && bytes < movie_bytes + chunks * (64 << 10),
        "{bytes} bytes uploaded for a movie of {movie_bytes}"
    );
    // the frames of a chunk go up in one copy (with its 6 small parameter uploads), not one
    // per frame: exactly one upload of 64 KiB or more per chunk
    assert!(calls <= chunks * 8, "{calls} uploads for {chunks} chunks");
    assert_eq!(
        cl.executor_bulk_uploads(dev) - bulk_before,
        chunks,
        "one pixel upload per chunk"
    );
    run_commands("opencl:0", &out);
    assert_eq!(cl.executors_created(dev), 1);
    std::fs::remove_dir_all(out).ok();
}

#[test]
fn cuda_detect_opens_one_executor() {
    let Some(_) = test_support::device_or_skip(arraybridge::registry(), Device::Cuda(0)) else {
        return;
    };
    let gpu = arraybridge::bridge_cuda::gpu(0).unwrap();
    let before = gpu.executors_created();
    assert!(before <= 1, "{before}");
    let out = tmp("cuda");
    run_commands("cuda:0", &out);
    assert_eq!(gpu.executors_created(), 1);
    std::fs::remove_dir_all(out).ok();
}
