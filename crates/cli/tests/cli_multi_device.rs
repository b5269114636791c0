//! `detect --device a,b` / `all`: several devices in one process (two PoCL devices here,
//! `POCL_DEVICES="pthread pthread"`), the same CSV as one device, each device's share in the
//! summary and the JSON; lists where one device is needed are clear errors. `paco --device
//! a,b` writes the same maps and candidates as one device. `bench scaling` reports a row per
//! worker count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn arraybridge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .args(args)
        .env("POCL_DEVICES", "pthread pthread")
        .output()
        .unwrap()
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-multi-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn movie() -> String {
    test_support::fixtures::path("detect/movie/movie_u16.npy")
        .display()
        .to_string()
}

/// Whether two OpenCL devices are there (PoCL installed); a skip otherwise.
fn two_opencl() -> bool {
    let out = arraybridge(&["devices"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let ok = text.lines().any(|l| l.starts_with("opencl:1"));
    if !ok {
        assert!(
            std::env::var("ARRAYBRIDGE_REQUIRE_OPENCL").as_deref() != Ok("1"),
            "ARRAYBRIDGE_REQUIRE_OPENCL=1 but fewer than two OpenCL devices"
        );
        eprintln!("skipping: fewer than two OpenCL devices");
    }
    ok
}

#[test]
fn two_devices_write_the_same_detections_as_one() {
    if !two_opencl() {
        return;
    }
    let dir = tmpdir("same");
    let one = dir.join("one.csv");
    let two = dir.join("two.csv");
    let common = [
        "--max-sigma",
        "3",
        "--threshold",
        "none",
        "--threshold-rel",
        "0.2",
    ];
    let run = |out: &std::path::Path, device: &str, extra: &[&str]| {
        let m = movie();
        let mut args = vec![
            "detect",
            &m,
            "-o",
            out.to_str().unwrap(),
            "--device",
            device,
        ];
        args.extend(common);
        args.extend(extra);
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        arraybridge(&refs)
    };
    let o = run(&one, "opencl:0", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(
        &two,
        "opencl:0,opencl:1",
        &["--batch-size", "2", "--chunk-frames", "7"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("opencl:0,opencl:1"), "{err}");
    assert!(err.contains("  opencl:1: "), "each device's share: {err}");
    assert_eq!(std::fs::read(&one).unwrap(), std::fs::read(&two).unwrap());
    let o = run(&two, "opencl:1,opencl:0", &["--json", "-q"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let shares = v["devices"].as_array().unwrap();
    assert_eq!(shares[0]["device"], "opencl:1");
    let frames: u64 = shares.iter().map(|s| s["frames"].as_u64().unwrap()).sum();
    assert_eq!(frames, v["frames"].as_u64().unwrap());
}

/// `--method locate` on two devices (and on the CPU beside one) writes the CSV of one device
/// and of the CPU byte for byte (float64 on PoCL), whatever the chunks and batches.
#[test]
fn locate_on_two_devices_writes_the_same_csv_as_one() {
    if !two_opencl() {
        return;
    }
    let dir = tmpdir("locate");
    let m = movie();
    let run = |name: &str, device: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut args = vec![
            "detect".to_string(),
            m.clone(),
            "-o".into(),
            out.display().to_string(),
            "--device".into(),
            device.into(),
            "--method".into(),
            "locate".into(),
            "--diameter".into(),
            "7".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = arraybridge(&refs);
        assert!(
            o.status.success(),
            "{device}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        (std::fs::read(&out).unwrap(), o)
    };
    let (cpu, _) = run("cpu.csv", "cpu", &[]);
    assert!(
        cpu.iter().filter(|&&b| b == b'\n').count() > 2,
        "features found"
    );
    let (one, _) = run("one.csv", "opencl:0", &[]);
    assert_eq!(cpu, one, "opencl:0 vs cpu");
    let (two, o) = run(
        "two.csv",
        "opencl:0,opencl:1",
        &["--batch-size", "1", "--chunk-frames", "3"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("method locate, device opencl:0,opencl:1"),
        "{err}"
    );
    assert!(err.contains("  opencl:1: "), "each device's share: {err}");
    assert_eq!(cpu, two, "two devices vs cpu");
    let (mixed, o) = run(
        "mixed.csv",
        "cpu,opencl:1",
        &["--batch-size", "2", "--json", "-q"],
    );
    assert_eq!(cpu, mixed, "cpu + opencl:1 vs cpu");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["method"], "locate");
    let shares = v["devices"].as_array().unwrap();
    assert_eq!(shares[1]["device"], "opencl:1");
    let frames: u64 = shares.iter().map(|s| s["frames"].as_u64().unwrap()).sum();
    assert_eq!(frames, v["frames"].as_u64().unwrap());
}

#[test]
fn device_lists_are_checked() {
    let dir = tmpdir("lists");
    let out = dir.join("x.csv");
    let out = out.to_str().unwrap();
    let m = movie();
    let fails = |args: &[&str], want: &str| {
        let o = arraybridge(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} should fail");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    fails(
        &["detect", &m, "-o", out, "--device", "opencl:0,opencl:0"],
        "named twice",
    );
    fails(
        &["detect", &m, "-o", out, "--device", "cpu,auto"],
        "cannot be part of a device list",
    );
    fails(
        &["detect", &m, "-o", out, "--device", "cpu,opencl:9"],
        "opencl:9",
    );
    fails(
        &[
            "detect",
            &m,
            "-o",
            out,
            "--device",
            "cpu,cpu",
            "--method",
            "locate",
            "--diameter",
            "7",
        ],
        "named twice",
    );
    // bench detect|paco time one device; a list points at bench scaling
    for what in ["detect", "paco"] {
        fails(
            &["bench", what, "--device", "cpu,opencl:0"],
            "bench scaling",
        );
    }
}

fn paco_fixture(name: &str) -> String {
    test_support::fixtures::path("paco")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn paco_on_two_devices_writes_the_same_files_as_one() {
    if !two_opencl() {
        return;
    }
    let dir = tmpdir("paco");
    let (cube, angles, psf) = (
        paco_fixture("synth_adi40_64_cube.fits"),
        paco_fixture("synth_adi40_64_angles.fits"),
        paco_fixture("synth_adi40_64_psf.fits"),
    );
    let run = |out: &str, device: &str, extra: &[&str]| {
        let mut args = vec![
            "paco", "--cube", &cube, "--angles", &angles, "--psf", &psf, "-o", out, "--device",
            device,
        ];
        args.extend(extra);
        arraybridge(&args)
    };
    for (tag, extra) in [("off", &[][..]), ("table", &["--subpixel"][..])] {
        let one = dir.join(format!("one-{tag}"));
        let two = dir.join(format!("two-{tag}"));
        let o = run(one.to_str().unwrap(), "opencl:0", extra);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = run(two.to_str().unwrap(), "opencl:0,opencl:1", extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("  opencl:1: "), "each device's share: {err}");
        for f in [
            "snr.fits",
            "flux.fits",
            "a.fits",
            "b.fits",
            "candidates.csv",
        ] {
            assert!(
                std::fs::read(one.join(f)).unwrap() == std::fs::read(two.join(f)).unwrap(),
                "{tag}: {f} differs"
            );
        }
    }
    let json = dir.join("json");
    let o = run(
        json.to_str().unwrap(),
        "opencl:1,opencl:0",
        &["--json", "-q"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["device"], "opencl:1,opencl:0");
    let shares = v["devices"].as_array().unwrap();
    assert_eq!(shares[0]["device"], "opencl:1");
    assert!(shares.iter().all(|s| s["bytes_up"].as_u64().unwrap() > 0));
    let units: u64 = shares.iter().map(|s| s["units"].as_u64().unwrap()).sum();
    assert!(units >= 2, "{v}");
    // a list of devices where one is needed is still a clear error
    let o = arraybridge(&[
        "paco",
        "--cube",
        &cube,
        "--angles",
        &angles,
        "--psf",
        &psf,
        "-o",
        json.to_str().unwrap(),
        "--device",
        "cpu,opencl:0",
        "--subpixel",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("drop cpu"));
}

#[test]
fn the_demo_runs_on_two_devices() {
    if !two_opencl() {
        return;
    }
    let dir = tmpdir("demo");
    let out = dir.join("demo");
    let o = arraybridge(&[
        "demo",
        "-o",
        out.to_str().unwrap(),
        "--device",
        "opencl:0,opencl:1",
        "--no-inputs",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = v.to_string();
    assert!(text.contains("shared by opencl:0,opencl:1"), "{text}");
    // every output but the summaries (timings, devices) is byte-identical to one device's
    let one = dir.join("one");
    let o = arraybridge(&[
        "demo",
        "-o",
        one.to_str().unwrap(),
        "--device",
        "opencl:0",
        "--no-inputs",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "detections.csv",
        "tracks.csv",
        "overlay.png",
        "snr.png",
        "snr.fits",
    ] {
        let (a, b) = (std::fs::read(out.join(f)), std::fs::read(one.join(f)));
        assert!(
            a.as_ref().ok() == b.as_ref().ok() && a.is_ok(),
            "{f} differs between two devices and one"
        );
    }
}

#[test]
fn the_scaling_report_has_a_row_per_worker_count() {
    if !two_opencl() {
        return;
    }
    for job in ["detect", "paco"] {
        let o = arraybridge(&[
            "bench",
            "scaling",
            job,
            "--device",
            "opencl:0,opencl:1",
            "--frames",
            "6",
            "--size",
            "32",
            "--reps",
            "1",
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["job"], job, "{v}");
        let rows = v["rows"].as_array().unwrap();
        let devices: Vec<&serde_json::Value> =
            rows.iter().filter(|r| r["kind"] == "devices").collect();
        assert_eq!(devices.len(), 2, "{v}");
        assert_eq!(devices[0]["workers"], 1, "{v}");
        assert_eq!(devices[1]["devices"], "opencl:0,opencl:1", "{v}");
        assert_eq!(devices[0]["speedup"], 1.0, "{v}");
        for r in rows {
            let (t, s, e, c) = (
                r["best_s"].as_f64().unwrap(),
                r["speedup"].as_f64().unwrap(),
                r["efficiency"].as_f64().unwrap(),
                r["cost"].as_f64().unwrap(),
            );
            let n = r["workers"].as_f64().unwrap();
            assert!(
                t > 0.0 && (e - s / n).abs() < 1e-9 && (c * e - 1.0).abs() < 1e-9,
                "{r}"
            );
        }
        // MPI ranks: two rows, or a reason they were skipped
        let mpi = rows.iter().filter(|r| r["kind"] == "mpi").count();
        let skipped = v["skipped"].as_array().unwrap();
        assert!(mpi == 2 || skipped.len() == 1, "{v}");
    }
    // more workers than devices: a clear error
    let o = arraybridge(&[
        "bench",
        "scaling",
        "detect",
        "--device",
        "opencl:0",
        "--workers",
        "1,2",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("2 workers need 2 devices"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
