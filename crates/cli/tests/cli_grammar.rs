//! One command-line grammar, and hostile flags and values through the command line: every case
//! ends with a typed error that names the flag or file (never a panic, an abort or a hang), and
//! outputs never replace inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use arraybridge::io::fits;
use arraybridge::io::npy::encode_npy;

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-grammar-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Run the binary with a deadline (a hang fails the test instead of hanging it).
fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("ARRAYBRIDGE_MEMORY_LIMIT_MB");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().ok();
            panic!("hang: {args:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "panic on {args:?}: {stderr}");
    assert!(
        out.status.code().is_some(),
        "killed by a signal (abort?) on {args:?}: {stderr}"
    );
    out
}

fn run(args: &[&str]) -> Output {
    run_env(args, &[])
}

/// The command fails with exit code 1 or 2 and stderr contains every needle (case-insensitive).
fn fails(args: &[&str], needles: &[&str]) -> String {
    fails_env(args, &[], needles)
}

fn fails_env(args: &[&str], env: &[(&str, &str)], needles: &[&str]) -> String {
    let o = run_env(args, env);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "should fail: {args:?}\n{stderr}");
    for n in needles {
        assert!(
            stderr.to_lowercase().contains(&n.to_lowercase()),
            "{n:?} not in the error of {args:?}:\n{stderr}"
        );
    }
    stderr
}

fn paco_fixture(name: &str) -> String {
    test_support::fixtures::path("paco")
        .join(name)
        .to_str()
        .unwrap()
        .to_owned()
}

fn detect_fixture(name: &str) -> String {
    test_support::fixtures::path("detect")
        .join(name)
        .to_str()
        .unwrap()
        .to_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn every_command_has_the_same_grammar() {
    for cmd in ["detect", "track", "paco", "demo"] {
        let o = run(&[cmd, "--help"]);
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{cmd}");
        assert!(help.contains("-o, --output"), "{cmd}: {help}");
        assert!(help.contains("-q, --quiet"), "{cmd}: {help}");
        assert!(help.contains("--json"), "{cmd}: {help}");
        if cmd != "track" {
            assert!(help.contains("[default: auto]"), "{cmd}: {help}");
        }
    }
    for cmd in [
        vec!["bench", "transfer", "--help"],
        vec!["bench", "detect", "--help"],
        vec!["bench", "paco", "--help"],
        vec!["devices", "--help"],
    ] {
        let o = run(&cmd);
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(
            help.contains("-q, --quiet") && help.contains("--json"),
            "{cmd:?}"
        );
        if cmd[0] == "bench" {
            assert!(help.contains("[default: auto]"), "{cmd:?}: {help}");
        }
    }
    // Global switches go before or after the command.
    assert!(run(&["--quiet", "devices", "--json"]).status.success());
    assert!(run(&["devices", "-q", "--json"]).status.success());
    // Values are checked by the parser (exit code 2, usage error).
    let o = run(&[
        "paco", "--cube", "c", "--angles", "a", "--psf", "p", "-o", "o", "--mode", "fast",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&[
        "paco",
        "--cube",
        "c",
        "--angles",
        "a",
        "--psf",
        "p",
        "-o",
        "o",
        "--stats-strategy",
        "optimal",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["detect", "m.npy", "-o", "x.csv", "--device", "gpu"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected auto, cpu"));
    // there is no f16 mode (left out: nothing here could check it), and no other precision
    // flag either: clear usage errors that point to --fast
    let o = run(&["detect", "m.npy", "-o", "x.csv", "--precision", "f16"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("f16 is not available")
            && err.contains("cl_khr_fp16")
            && err.contains("--fast"),
        "{err}"
    );
    let o = run(&["detect", "m.npy", "-o", "x.csv", "--precision", "bf8"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unknown precision") && err.contains("--fast"),
        "{err}"
    );
}

#[test]
fn absurd_flags_are_typed_errors() {
    let d = tmpdir("flags");
    let m = detect_fixture("blob_log/hisnr_f32.npy");
    let o = d.join("x.csv");
    for n in ["100000", "18446744073709551615"] {
        fails(
            &[
                "detect",
                &m,
                "-o",
                s(&o),
                "--num-sigma",
                n,
                "--device",
                "cpu",
            ],
            &["num_sigma", "1..=1000"],
        );
    }
    fails(
        &[
            "detect",
            &m,
            "-o",
            s(&o),
            "--num-sigma",
            "18446744073709551616",
        ],
        &["--num-sigma"],
    );
    fails(
        &["detect", &m, "-o", s(&o), "--batch-size", "0"],
        &["--batch-size"],
    );
    let (cube, ang, psf) = (
        paco_fixture("synth_adi40_64_cube.fits"),
        paco_fixture("synth_adi40_64_angles.fits"),
        paco_fixture("synth_adi40_64_psf.fits"),
    );
    let out = d.join("paco");
    for r in ["10000", "2147483648", "9223372036854775808", "0"] {
        fails(
            &[
                "paco",
                "--cube",
                &cube,
                "--angles",
                &ang,
                "--psf",
                &psf,
                "-o",
                s(&out),
                "--radius",
                r,
            ],
            &["--radius"],
        );
    }
    // A radius the frame cannot hold: a clear message, quickly.
    fails(
        &[
            "paco",
            "--cube",
            &cube,
            "--angles",
            &ang,
            "--psf",
            &psf,
            "-o",
            s(&out),
            "--radius",
            "300",
            "--device",
            "cpu",
        ],
        &["too small for patches of radius 300"],
    );
    // Benchmarks: sizes are bounded by the parser or by the memory the machine has.
    fails(
        &["bench", "transfer", "--sizes-mb", "1000000"],
        &["--sizes-mb 1000000", "fit"],
    );
    fails(&["bench", "detect", "--size", "1000000"], &["--size"]);
    fails(&["bench", "detect", "--frames", "100000000"], &["--frames"]);
    fails(
        &["bench", "detect", "--particles", "100000000"],
        &["--particles"],
    );
    fails(
        &["bench", "detect", "--particles", "5000000", "--size", "512"],
        &["--particles", "at most"],
    );
    fails(
        &[
            "bench",
            "detect",
            "--frames",
            "1000000",
            "--size",
            "65536",
            "--particles",
            "0",
        ],
        &["bench detect --frames 1000000 --size 65536", "fit"],
    );
    fails(
        &["bench", "paco", "--frames", "100000", "--size", "65536"],
        &["bench paco --frames 100000 --size 65536", "fit"],
    );
}

#[test]
fn outputs_never_replace_inputs() {
    let d = tmpdir("overwrite");
    let m = d.join("m.npy");
    std::fs::copy(detect_fixture("blob_log/hisnr_f32.npy"), &m).unwrap();
    let before = std::fs::read(&m).unwrap();
    fails(
        &["detect", s(&m), "-o", s(&m)],
        &["would overwrite the input"],
    );
    assert_eq!(std::fs::read(&m).unwrap(), before, "the movie was changed");
    // The same file spelled differently.
    let other = d.join(".").join("m.npy");
    fails(&["detect", s(&m), "-o", s(&other)], &["would overwrite"]);
    // track: -o equal to its input.
    let csv = d.join("d.csv");
    std::fs::write(&csv, "frame,y,x\n0,1,1\n1,1.5,1\n").unwrap();
    fails(
        &["track", s(&csv), "-o", s(&csv), "--search-range", "3"],
        &["would overwrite"],
    );
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap(),
        "frame,y,x\n0,1,1\n1,1.5,1\n"
    );
    // paco: the cube inside the output folder under an output's name.
    let cube = d.join("snr.fits");
    std::fs::copy(paco_fixture("synth_adi40_64_cube.fits"), &cube).unwrap();
    fails(
        &[
            "paco",
            "--cube",
            s(&cube),
            "--angles",
            &paco_fixture("synth_adi40_64_angles.fits"),
            "--psf",
            &paco_fixture("synth_adi40_64_psf.fits"),
            "-o",
            s(&d),
        ],
        &["would overwrite the input"],
    );
    // Output folders that do not exist, or are files, fail before the movie is read.
    fails(
        &["detect", s(&m), "-o", s(&d.join("no/such/dir/x.csv"))],
        &["does not exist"],
    );
    fails(&["detect", s(&m), "-o", s(&d)], &["is a folder"]);
}

#[cfg(unix)]
#[test]
fn read_only_output_folders_fail_before_work() {
    use std::os::unix::fs::PermissionsExt;
    let d = tmpdir("readonly");
    let ro = d.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root ignores permissions: nothing to test then.
    if std::fs::write(ro.join("probe"), b"x").is_ok() {
        return;
    }
    let m = detect_fixture("blob_log/hisnr_f32.npy");
    let e = fails(
        &["detect", &m, "-o", s(&ro.join("x.csv"))],
        &["i/o error", "ro"],
    );
    assert!(!e.contains("invalid input"), "{e}");
    // The OS error is printed once.
    assert_eq!(e.matches("Permission denied").count(), 1, "{e}");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn non_finite_pixels_are_errors() {
    let d = tmpdir("nonfinite");
    // detect: one +Inf pixel in an f32 movie.
    let (t, h, w) = (3usize, 32usize, 32usize);
    let mut px: Vec<f32> = (0..t * h * w).map(|i| (i % 17) as f32 * 0.01).collect();
    px[h * w + 5 * w + 7] = f32::INFINITY;
    let bytes: Vec<u8> = px.iter().flat_map(|v| v.to_le_bytes()).collect();
    let m = d.join("inf.npy");
    std::fs::write(&m, encode_npy("<f4", &[t, h, w], &bytes)).unwrap();
    fails(
        &[
            "detect",
            s(&m),
            "-o",
            s(&d.join("x.csv")),
            "--device",
            "cpu",
        ],
        &["frames 1..2", "infinite", "inf.npy"],
    );
    // paco: one all-NaN frame, one +Inf pixel.
    let cube = fits::read_image(paco_fixture("synth_adi40_64_cube.fits")).unwrap();
    let (ang, psf) = (
        paco_fixture("synth_adi40_64_angles.fits"),
        paco_fixture("synth_adi40_64_psf.fits"),
    );
    let mut nan_frame = cube.clone();
    nan_frame.index_axis_mut(ndarray::Axis(0), 7).fill(f64::NAN);
    let p = d.join("nanframe.fits");
    fits::write_image(&p, &nan_frame).unwrap();
    let out = d.join("out");
    fails(
        &[
            "paco",
            "--cube",
            s(&p),
            "--angles",
            &ang,
            "--psf",
            &psf,
            "-o",
            s(&out),
            "--device",
            "cpu",
        ],
        &["non-finite", "first in frame 7"],
    );
    let mut inf = cube.clone();
    inf[[3, 40, 45]] = f64::INFINITY;
    let p = d.join("inf.fits");
    fits::write_image(&p, &inf).unwrap();
    fails(
        &[
            "paco",
            "--cube",
            s(&p),
            "--angles",
            &ang,
            "--psf",
            &psf,
            "-o",
            s(&out),
            "--device",
            "cpu",
        ],
        &["non-finite", "first in frame 3"],
    );
    // An even-sized PSF.
    let psf_a = fits::read_image(&psf).unwrap();
    let even = psf_a
        .slice_each_axis(|ax| ndarray::Slice::from(0..ax.len - 1))
        .to_owned();
    let p = d.join("even_psf.fits");
    fits::write_image(&p, &even).unwrap();
    fails(
        &[
            "paco",
            "--cube",
            &paco_fixture("synth_adi40_64_cube.fits"),
            "--angles",
            &ang,
            "--psf",
            s(&p),
            "-o",
            s(&out),
            "--device",
            "cpu",
        ],
        &["odd sides"],
    );
}

#[test]
fn large_movies_get_a_memory_error_that_says_what_fits() {
    let d = tmpdir("large");
    // 1 × 2000 × 2000 u8: 4 MB on disk; blob_log on the CPU needs the frame in f64, its padded
    // copy and a third image (≈ 100 MB; not the 0.4 GB scale space, which it never holds).
    let (h, w) = (2000usize, 2000usize);
    let px: Vec<u8> = (0..h * w).map(|i| (i % 251) as u8).collect();
    let m = d.join("big.npy");
    std::fs::write(&m, encode_npy("|u1", &[1, h, w], &px)).unwrap();
    fails_env(
        &[
            "detect",
            s(&m),
            "-o",
            s(&d.join("x.csv")),
            "--device",
            "cpu",
        ],
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "64")],
        &["--num-sigma", "ARRAYBRIDGE_MEMORY_LIMIT_MB", "fewer scales"],
    );
    // 300 MB is enough for the CPU, which the whole scale space (0.4 GB) would not be
    let out = d.join("fits.csv");
    let o = run_env(
        &["detect", s(&m), "-o", s(&out), "--device", "cpu", "-q"],
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "300")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.exists());
    // and `bench detect` checks the same way: the back end's own figure
    let o = run_env(
        &[
            "bench",
            "detect",
            "--device",
            "cpu",
            "--frames",
            "1",
            "--size",
            "2000",
            "--particles",
            "10",
            "--batch-sizes",
            "1",
        ],
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "300")],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn locate_checks_its_frames_in_flight_before_locating() {
    // 1 × 2000 × 2000 u8: locate holds about five float64 images of the frame (≈ 160 MB), so
    // 64 MiB is refused up front, naming the frames and --batch-size; 300 MiB runs
    let d = tmpdir("locate-large");
    let (h, w) = (2000usize, 2000usize);
    let px: Vec<u8> = (0..h * w).map(|i| (i % 251) as u8).collect();
    let m = d.join("big.npy");
    std::fs::write(&m, encode_npy("|u1", &[1, h, w], &px)).unwrap();
    let args = |out: &Path| {
        vec![
            "detect".to_owned(),
            s(&m).to_owned(),
            "-o".to_owned(),
            s(out).to_owned(),
            "--device".to_owned(),
            "cpu".to_owned(),
            "--method".to_owned(),
            "locate".to_owned(),
            "--diameter".to_owned(),
            "7".to_owned(),
            "-q".to_owned(),
        ]
    };
    let refused = d.join("refused.csv");
    let a = args(&refused);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    fails_env(
        &a,
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "64")],
        &[
            "locate on 1 frame(s) of 2000x2000",
            "--batch-size",
            "ARRAYBRIDGE_MEMORY_LIMIT_MB",
        ],
    );
    assert!(!refused.exists());
    let out = d.join("fits.csv");
    let a = args(&out);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = run_env(&a, &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "300")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.exists());
    // `bench detect --method locate` checks the same way
    fails_env(
        &[
            "bench",
            "detect",
            "--method",
            "locate",
            "--device",
            "cpu",
            "--frames",
            "1",
            "--size",
            "2000",
            "--particles",
            "10",
            "--batch-sizes",
            "1",
        ],
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "64")],
        &["locate on 1 frame(s) of 2000x2000", "--batch-sizes"],
    );
}

#[test]
fn bench_transfer_counts_the_device_buffer_of_a_cpu_device() {
    // PoCL's device memory is the host's: 40 MiB needs six buffers of 40 MiB
    let cl = arraybridge::registry()
        .device_infos()
        .any(|i| i.device == arraybridge::Device::OpenCl(0));
    if !cl {
        eprintln!("skipping: no opencl:0");
        return;
    }
    let out = fails_env(
        &[
            "bench",
            "transfer",
            "--device",
            "opencl:0",
            "--sizes-mb",
            "40",
            "--reps",
            "1",
        ],
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "100")],
        &[
            "--sizes-mb 40 on opencl:0",
            "host memory too",
            "ARRAYBRIDGE_MEMORY_LIMIT_MB",
        ],
    );
    assert!(!out.contains("panicked"), "{out}");
}

#[test]
fn bench_transfer_json_is_json() {
    // it printed its Markdown table under --json until 2026-11-28
    let cl = arraybridge::registry()
        .device_infos()
        .any(|i| i.device == arraybridge::Device::OpenCl(0));
    if !cl {
        eprintln!("skipping: no opencl:0");
        return;
    }
    let o = run(&[
        "--json",
        "bench",
        "transfer",
        "--device",
        "opencl:0",
        "--sizes-mb",
        "1",
        "--reps",
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["command"], "bench transfer");
    let row = &v["rows"][0];
    assert_eq!(row["bytes"], 1 << 20);
    assert!(row["h2d_gb_per_s"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn huge_sigmas_are_counted_before_their_kernels_are_built() {
    // a 64×64 frame is nothing, but 1000 scales up to σ = 10⁴ build 1000 kernels pairs of
    // 40 001 taps (640 MB): refused under 300 MB, up front and naming --max-sigma
    let d = tmpdir("sigmas");
    let px: Vec<u8> = (0..64 * 64).map(|i| (i % 251) as u8).collect();
    let m = d.join("small.npy");
    std::fs::write(&m, encode_npy("|u1", &[1, 64, 64], &px)).unwrap();
    let x = d.join("x.csv");
    let base = [
        "detect",
        s(&m),
        "-o",
        s(&x),
        "--device",
        "cpu",
        "--min-sigma",
        "9999",
        "--max-sigma",
        "10000",
        "--num-sigma",
    ];
    let with = |ns| [&base[..], &[ns]].concat();
    fails_env(
        &with("1000"),
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "300")],
        &[
            "--max-sigma",
            "ARRAYBRIDGE_MEMORY_LIMIT_MB",
            "smaller max sigma",
        ],
    );
    // one scale of that size fits (and runs: the taps fold onto the frame by reflection)
    let o = run_env(&with("1"), &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "300")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Issue 32, class 6: values that used to be accepted silently are refused with a message that
/// names them, and a valid value still works.
#[test]
fn silently_ignored_values_are_refused() {
    let d = tmpdir("silent");
    let m = detect_fixture("blob_log/hisnr_u16.npy");
    let o = d.join("x.csv");
    // a memory limit that is not a whole number of MiB is refused, by every command
    for v in ["abc", "1e0", "-5", "0", "4096 MiB"] {
        fails_env(
            &["devices"],
            &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", v)],
            &["ARRAYBRIDGE_MEMORY_LIMIT_MB", "whole number of MiB"],
        );
    }
    let ok = run_env(&["devices"], &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", " 4096 ")]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // NaN locate thresholds would remove every feature: refused, like --minmass NaN
    let locate = [
        "detect",
        &m,
        "-o",
        s(&o),
        "--device",
        "cpu",
        "--method",
        "locate",
    ];
    for (flag, v, needle) in [
        ("--maxsize", "NaN", "maxsize"),
        ("--locate-threshold", "NaN", "threshold"),
        ("--locate-threshold", "inf", "threshold"),
    ] {
        let mut args = locate.to_vec();
        args.extend(["--diameter", "7", flag, v]);
        fails(&args, &[needle]);
        assert!(!o.exists(), "{flag} {v} wrote an output");
    }
    let mut args = locate.to_vec();
    args.extend([
        "--diameter",
        "7",
        "--maxsize",
        "inf",
        "--locate-threshold",
        "1",
    ]);
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // integers past what any frame holds: nothing to detect, or a refusal; never an overflow
    let rel = [
        "--threshold",
        "none",
        "--threshold-rel",
        "0.2",
        "--device",
        "cpu",
    ];
    let mut args = vec![
        "detect",
        &m,
        "-o",
        s(&o),
        "--exclude-border",
        "18446744073709551615",
    ];
    args.extend(rel);
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(&o).unwrap();
    assert_eq!(
        csv.lines().count(),
        1,
        "a border past half the frame leaves no detection"
    );
    std::fs::remove_file(&o).unwrap();
    let mut args = locate.to_vec();
    args.extend(["--diameter", "18446744073709551615"]);
    fails(&args, &["diameter", "65535"]);
    // linking on one column twice is not 2-D linking
    let det = d.join("det.csv");
    std::fs::write(&det, "frame,y,x\n0,1.0,2.0\n1,1.5,2.5\n").unwrap();
    fails(
        &[
            "track",
            s(&det),
            "-o",
            s(&d.join("t.csv")),
            "--search-range",
            "3",
            "--pos-columns",
            "y,y",
        ],
        &["--pos-columns", "twice"],
    );
    let _ = std::fs::remove_dir_all(&d);
}
