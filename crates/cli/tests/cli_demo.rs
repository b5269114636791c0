//! End-to-end tests of `arraybridge demo`: outputs, figures, scores and error paths.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .arg("demo")
        .args(args)
        .output()
        .unwrap()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-demo-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// One default demo run shared by the tests of this file: (output dir, stdout).
fn shared_run() -> &'static (PathBuf, String) {
    static RUN: OnceLock<(PathBuf, String)> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tmpdir("shared");
        let o = demo(&["-o", dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "demo failed:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        (dir, String::from_utf8_lossy(&o.stdout).into_owned())
    })
}

fn summary() -> serde_json::Value {
    let (dir, _) = shared_run();
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Decoded RGB8 image: (width, height, pixels).
fn read_png(path: &Path) -> (usize, usize, Vec<[u8; 3]>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0u8; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb, "{}", path.display());
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let (w, h) = (info.width as usize, info.height as usize);
    let px = buf[..w * h * 3]
        .chunks_exact(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (w, h, px)
}

fn variance(px: &[[u8; 3]]) -> f64 {
    let v: Vec<f64> = px
        .iter()
        .map(|p| p.iter().map(|&c| f64::from(c)).sum::<f64>())
        .collect();
    let m = v.iter().sum::<f64>() / v.len() as f64;
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn every_output_exists_and_the_summary_is_printed() {
    let (dir, stdout) = shared_run();
    for name in [
        "detections.csv",
        "tracks.csv",
        "overlay.png",
        "snr.png",
        "snr.fits",
        "summary.txt",
        "summary.json",
        "inputs/movie.npy",
        "inputs/truth.csv",
        "inputs/adi_cube.fits",
        "inputs/adi_angles.fits",
        "inputs/adi_psf.fits",
    ] {
        let m = std::fs::metadata(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(m.len() > 0, "{name} is empty");
    }
    let txt = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
    assert_eq!(stdout, &txt, "stdout is the summary");
    for needle in [
        "recall",
        "precision",
        "tracks",
        "S/N",
        "timings",
        "detection",
    ] {
        assert!(txt.contains(needle), "summary.txt lacks {needle:?}:\n{txt}");
    }
}

#[test]
fn summary_json_scores_and_planet() {
    let s = summary();
    let d = &s["detection"];
    assert!(f(&d["recall"]) >= 0.8, "recall {}", d["recall"]);
    assert!(f(&d["precision"]) >= 0.8, "precision {}", d["precision"]);
    assert!(f(&d["detections"]) > 0.0);
    assert_eq!(f(&d["match_radius_px"]), 2.0);
    assert!(d["device"]["device"].is_string());
    assert!(!d["device"]["reason"].as_str().unwrap().is_empty());
    assert!(f(&s["tracking"]["tracks"]) >= 1.0);
    let p = &s["paco"];
    assert!(!p["device"]["reason"].as_str().unwrap().is_empty());
    let (t, r) = (&p["planet_true"], &p["planet_recovered"]);
    let err = (f(&t["y"]) - f(&r["y"])).hypot(f(&t["x"]) - f(&r["x"]));
    assert!(err <= 2.0, "planet recovered {err:.2} px away: {p}");
    assert!((f(&r["error_px"]) - err).abs() < 1e-9);
    assert!(f(&r["snr"]) >= 5.0, "planet S/N {}", r["snr"]);
    assert!(
        f(&r["snr"]) > f(&p["max_other_snr"]),
        "the planet is not the strongest peak: {p}"
    );
    for k in ["detect", "track", "PACO", "total"] {
        assert!(f(&s["timings_s"][k]) >= 0.0, "timing {k} missing");
    }
}

#[test]
fn csv_outputs_match_the_summary() {
    let (dir, _) = shared_run();
    let s = summary();
    let det = std::fs::read_to_string(dir.join("detections.csv")).unwrap();
    let mut lines = det.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("frame,y,x,sigma,response,y_refined")
    );
    assert_eq!(lines.count() as f64, f(&s["detection"]["detections"]));
    let tracks = std::fs::read_to_string(dir.join("tracks.csv")).unwrap();
    let mut lines = tracks.lines();
    assert!(lines.next().unwrap().ends_with(",particle"));
    let ids: std::collections::HashSet<&str> = lines
        .map(|l| l.rsplit(',').next().unwrap())
        .filter(|id| !id.starts_with('-'))
        .collect();
    assert_eq!(ids.len() as f64, f(&s["tracking"]["tracks"]));
}

#[test]
fn overlay_png_is_the_first_frame_with_markers() {
    let (dir, _) = shared_run();
    let s = summary();
    let o = &s["outputs"]["overlay_png"];
    let (w, h, px) = read_png(&dir.join("overlay.png"));
    let scale = f(&o["scale"]) as usize;
    assert_eq!((w, h), (256 * scale, 256 * scale));
    assert_eq!((w as f64, h as f64), (f(&o["width"]), f(&o["height"])));
    assert!(variance(&px) > 0.0, "blank overlay");
    let green = px.iter().filter(|p| **p == [0, 255, 0]).count();
    assert!(
        green > 100,
        "detection circles missing ({green} green pixels)"
    );
    let coloured = px
        .iter()
        .filter(|p| !(p[0] == p[1] && p[1] == p[2]) && **p != [0, 255, 0])
        .count();
    assert!(
        coloured > 100,
        "track polylines missing ({coloured} pixels)"
    );
}

#[test]
fn snr_png_circles_the_planet_where_it_is() {
    let (dir, _) = shared_run();
    let s = summary();
    let o = &s["outputs"]["snr_png"];
    let (w, h, px) = read_png(&dir.join("snr.png"));
    assert_eq!((w as f64, h as f64), (f(&o["width"]), f(&o["height"])));
    let scale = f(&o["scale"]);
    let n = f(&s["paco"]["cube"]["height"]);
    assert!(w as f64 >= n * scale && h as f64 >= n * scale);
    assert!(variance(&px) > 0.0, "blank S/N map");
    // The true planet in canvas coordinates: row 0 of the map is at the bottom.
    assert_eq!(o["row0_at_bottom"], serde_json::json!(true));
    let t = &s["paco"]["planet_true"];
    let cx = f(&t["x"]) * scale + (scale - 1.0) / 2.0;
    let cy = (n - 1.0 - f(&t["y"])) * scale + (scale - 1.0) / 2.0;
    let red: Vec<(f64, f64)> = px
        .iter()
        .enumerate()
        .filter(|(_, p)| **p == [255, 0, 0])
        .map(|(i, _)| ((i % w) as f64, (i / w) as f64))
        .collect();
    assert!(
        red.len() > 50,
        "no planet marker ({} red pixels)",
        red.len()
    );
    let (mx, my) = (
        red.iter().map(|p| p.0).sum::<f64>() / red.len() as f64,
        red.iter().map(|p| p.1).sum::<f64>() / red.len() as f64,
    );
    let off = (mx - cx).hypot(my - cy) / scale;
    assert!(off <= 2.0, "marker centred {off:.2} map px from the planet");
    let radius = f(&o["marker_radius"]);
    for &(x, y) in &red {
        let d = (x - cx).hypot(y - cy);
        assert!(
            d <= radius + 3.0 + 2.0 * scale,
            "stray marker pixel at ({x}, {y})"
        );
    }
}

#[test]
fn runs_are_reproducible() {
    let a = tmpdir("repro-a");
    let b = tmpdir("repro-b");
    for d in [&a, &b] {
        let o = demo(&["--device", "cpu", "--no-inputs", "-o", d.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    for name in ["detections.csv", "tracks.csv", "snr.fits"] {
        assert_eq!(
            std::fs::read(a.join(name)).unwrap(),
            std::fs::read(b.join(name)).unwrap(),
            "{name} differs between runs"
        );
    }
    assert!(!a.join("inputs").exists(), "--no-inputs wrote inputs/");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["detection"]["device"]["device"], "cpu");
    assert!(
        s["detection"]["device"]["reason"]
            .as_str()
            .unwrap()
            .contains("--device cpu")
    );
    // the folder is replaced as a whole: a demo folder again, not one holding the user's files
    // (the demo overwrote its own names among them before 2026-11-28)
    std::fs::write(a.join("notes.txt"), "mine").unwrap();
    std::fs::write(a.join("tracks.csv"), "mine too").unwrap();
    let o = demo(&["--device", "cpu", "--no-inputs", "-o", a.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("notes.txt"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(a.join("notes.txt")).unwrap(),
        "mine"
    );
    assert_eq!(
        std::fs::read_to_string(a.join("tracks.csv")).unwrap(),
        "mine too"
    );
    std::fs::remove_file(a.join("notes.txt")).unwrap();
    let o = demo(&["--device", "cpu", "--no-inputs", "-o", a.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(a.join("tracks.csv")).unwrap(),
        std::fs::read(b.join("tracks.csv")).unwrap()
    );
    std::fs::remove_dir_all(&a).ok();
    std::fs::remove_dir_all(&b).ok();
}

#[test]
fn unknown_or_unavailable_devices_fail_cleanly() {
    for (dev, needle) in [
        ("cuda:7", "cuda:7"),
        ("opencl:42", "opencl:42"),
        ("nonsense", "nonsense"),
        ("torch:cpu", "torch:cpu"),
    ] {
        let dir = tmpdir(&format!("bad-{}", dev.replace(':', "-")));
        let o = demo(&["--device", dev, "-o", dir.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "--device {dev} succeeded");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("error:"), "{stderr}");
        assert!(stderr.contains(needle), "--device {dev}: {stderr}");
        assert!(!dir.exists(), "--device {dev} did work before failing");
    }
}

fn run_cli(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?} failed:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    o
}

/// The generated inputs reproduce the demo's results with the individual commands (the README's
/// worked examples), when the demo ran its stages on the CPU.
#[test]
fn inputs_reproduce_with_detect_track_and_paco() {
    let (dir, _) = shared_run();
    let s = summary();
    if s["detection"]["device"]["device"] != "cpu" || s["paco"]["device"]["device"] != "cpu" {
        eprintln!("the demo ran on a device; the CPU commands may differ in the last bits");
        return;
    }
    let p = |name: &str| dir.join(name).display().to_string();
    let work = tmpdir("commands");
    std::fs::create_dir_all(&work).unwrap();
    let w = |name: &str| work.join(name).display().to_string();
    run_cli(&[
        "detect",
        &p("inputs/movie.npy"),
        "-o",
        &w("det.csv"),
        "--max-sigma",
        "3",
        "--threshold",
        "none",
        "--threshold-rel",
        "0.2",
        "--refine",
        "--quiet",
    ]);
    assert_eq!(
        std::fs::read(work.join("det.csv")).unwrap(),
        std::fs::read(dir.join("detections.csv")).unwrap(),
        "`arraybridge detect` differs from the demo's detections.csv"
    );
    run_cli(&[
        "track",
        &w("det.csv"),
        "-o",
        &w("tracks.csv"),
        "--search-range",
        "5",
        "--memory",
        "2",
        "--pos-columns",
        "y_refined,x_refined",
        "--quiet",
    ]);
    assert_eq!(
        std::fs::read(work.join("tracks.csv")).unwrap(),
        std::fs::read(dir.join("tracks.csv")).unwrap(),
        "`arraybridge track` differs from the demo's tracks.csv"
    );
    let o = run_cli(&[
        "paco",
        "--cube",
        &p("inputs/adi_cube.fits"),
        "--angles",
        &p("inputs/adi_angles.fits"),
        "--psf",
        &p("inputs/adi_psf.fits"),
        "--fwhm",
        "4",
        "--device",
        "cpu",
        "-o",
        &w("paco"),
    ]);
    let a = arraybridge::io::fits::read_image(work.join("paco/snr.fits")).unwrap();
    let b = arraybridge::io::fits::read_image(dir.join("snr.fits")).unwrap();
    assert_eq!(a.shape(), b.shape());
    assert!(
        a.iter()
            .zip(b.iter())
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())),
        "`arraybridge paco` S/N map differs from the demo's snr.fits"
    );
    // The best candidate of `paco` is the demo's recovered planet pixel.
    let table = String::from_utf8_lossy(&o.stdout);
    let first = table.lines().nth(1).unwrap();
    let cols: Vec<&str> = first.split_whitespace().collect();
    let px = &s["paco"]["planet_recovered"]["pixel"];
    assert_eq!(cols[1], px[0].to_string(), "{table}");
    assert_eq!(cols[2], px[1].to_string(), "{table}");
    std::fs::remove_dir_all(&work).ok();
}
