//! End-to-end tests of `arraybridge paco` on the shared fixture and on bad inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use arraybridge::io::fits;

fn fixtures() -> PathBuf {
    test_support::fixtures::path("paco")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-paco-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn paco(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .arg("paco")
        .args(args)
        .output()
        .unwrap()
}

fn f(name: &str) -> String {
    fixtures().join(name).display().to_string()
}

/// `arraybridge paco` on the fixture's cube, angles and PSF, writing to `out`, plus `extra`.
fn fixture_paco(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let (cube, angles, psf) = (
        f("synth_adi40_64_cube.fits"),
        f("synth_adi40_64_angles.fits"),
        f("synth_adi40_64_psf.fits"),
    );
    let mut args = vec!["--cube", &cube, "--angles", &angles, "--psf", &psf, "-o"];
    let out = out.to_str().unwrap();
    args.push(out);
    args.extend_from_slice(extra);
    paco(&args)
}

#[test]
fn fixture_end_to_end_vip_golden() {
    let out = tmpdir("vip");
    let o = fixture_paco(
        &out,
        &[
            "--mode",
            "vip",
            "--psf-norm-factor",
            "9.540355072844195",
            "--flux",
            "--top",
            "1",
            "--json",
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    for name in [
        "snr.fits",
        "flux.fits",
        "a.fits",
        "b.fits",
        "snr.png",
        "candidates.csv",
    ] {
        assert!(out.join(name).exists(), "{name} missing");
    }
    let a = fits::read_image(out.join("a.fits")).unwrap();
    let gold =
        fits::read_image(fixtures().join("golden/vip211_fastpaco_synth_nosubpix_a.fits")).unwrap();
    assert_eq!(a.shape(), gold.shape());
    let mut same = 0;
    for (x, g) in a.iter().zip(gold.iter()) {
        assert_eq!(x.is_nan(), g.is_nan());
        if g.is_finite() && ((x - g) / g).abs() < 1e-9 {
            same += 1;
        }
    }
    // All finite pixels but the float-trap ones (spec §4) match to 1e-9.
    assert!(same >= 2305 - 70, "{same}");
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let best = &json["candidates"][0];
    assert_eq!(
        (best["y"].as_u64(), best["x"].as_u64()),
        (Some(40), Some(45))
    );
    assert!((best["snr"].as_f64().unwrap() - 13.600).abs() < 1e-3);
    let uf = best["unbiased_flux"].as_f64().unwrap();
    assert!((uf / 572.4 - 1.0).abs() < 0.05, "{uf}");
    let csv = std::fs::read_to_string(out.join("candidates.csv")).unwrap();
    assert!(
        csv.starts_with("y,x,separation_px,angle_deg,snr,flux,unbiased_flux,unbiased_flux_err")
    );
    assert!(csv.lines().nth(1).unwrap().starts_with("40,45,"));
    let png = std::fs::read(out.join("snr.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn table_output_with_subpixel_and_fitted_fwhm() {
    let out = tmpdir("table");
    let o = fixture_paco(&out, &["--subpixel", "--calibrate", "--device", "cpu"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let first = stdout.lines().nth(1).unwrap();
    let cols: Vec<&str> = first.split_whitespace().collect();
    assert_eq!((cols[1], cols[2]), ("39", "45"), "{stdout}");
    let cal = fits::read_image(out.join("snr_calibrated.fits")).unwrap();
    assert_eq!(cal.shape(), &[64, 64]);
    std::fs::remove_dir_all(&out).ok();
}

fn expect_error(args: &[&str], needle: &str) {
    let o = paco(args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "should fail: {args:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.to_lowercase().contains(needle),
        "{needle:?} not in {stderr}"
    );
}

#[test]
fn bad_inputs_fail_cleanly() {
    let out = tmpdir("bad");
    let o = out.to_str().unwrap();
    // inputs beside the output folder, not in it (it is replaced as a whole)
    let inp = tmpdir("bad-inputs");
    let cube = f("synth_adi40_64_cube.fits");
    let ang = f("synth_adi40_64_angles.fits");
    let psf = f("synth_adi40_64_psf.fits");
    // Not a FITS file.
    let txt = inp.join("not.fits");
    std::fs::write(&txt, "this is not a FITS file").unwrap();
    expect_error(
        &[
            "--cube",
            txt.to_str().unwrap(),
            "--angles",
            &ang,
            "--psf",
            &psf,
            "-o",
            o,
        ],
        "not a fits file",
    );
    // A star centre outside the frame.
    expect_error(
        &[
            "--cube",
            &cube,
            "--angles",
            &ang,
            "--psf",
            &psf,
            "-o",
            o,
            "--center",
            "1000,1000",
        ],
        "outside the 64×64 frame",
    );
    // A PSF normalisation factor whose template leaves the doubles' range (every map was NaN,
    // exit 0, with a warning about the frames' size)
    for factor in ["1e160", "1e-160"] {
        expect_error(
            &[
                "--cube",
                &cube,
                "--angles",
                &ang,
                "--psf",
                &psf,
                "-o",
                o,
                "--psf-norm-factor",
                factor,
            ],
            "outside [1e-100, 1e100]",
        );
    }
    // Missing file.
    expect_error(
        &[
            "--cube",
            "/nonexistent/c.fits",
            "--angles",
            &ang,
            "--psf",
            &psf,
            "-o",
            o,
        ],
        "i/o error",
    );
    // Frame/angle count mismatch.
    let short = inp.join("short.fits");
    let a = fits::read_image(fixtures().join("synth_adi40_64_angles.fits")).unwrap();
    let s = a
        .slice_each_axis(|ax| ndarray::Slice::from(0..ax.len - 1))
        .to_owned();
    fits::write_image(&short, &s).unwrap();
    expect_error(
        &[
            "--cube",
            &cube,
            "--angles",
            short.to_str().unwrap(),
            "--psf",
            &psf,
            "-o",
            o,
        ],
        "shape mismatch",
    );
    // Angles as (T, 1) are accepted.
    let col = inp.join("col.fits");
    fits::write_image(
        &col,
        &a.clone()
            .into_shape_with_order(ndarray::IxDyn(&[40, 1]))
            .unwrap(),
    )
    .unwrap();
    let ok = paco(&[
        "--cube",
        &cube,
        "--angles",
        col.to_str().unwrap(),
        "--psf",
        &psf,
        "-o",
        o,
        "--fwhm",
        "4",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // PSF larger than the frame.
    let big = inp.join("big.fits");
    fits::write_image(
        &big,
        &ndarray::ArrayD::<f64>::ones(ndarray::IxDyn(&[65, 65])),
    )
    .unwrap();
    expect_error(
        &[
            "--cube",
            &cube,
            "--angles",
            &ang,
            "--psf",
            big.to_str().unwrap(),
            "-o",
            o,
        ],
        "larger than the frames",
    );
    // NaN-only cube.
    let nan = inp.join("nan.fits");
    fits::write_image(
        &nan,
        &ndarray::ArrayD::<f64>::from_elem(ndarray::IxDyn(&[40, 64, 64]), f64::NAN),
    )
    .unwrap();
    expect_error(
        &[
            "--cube",
            nan.to_str().unwrap(),
            "--angles",
            &ang,
            "--psf",
            &psf,
            "-o",
            o,
        ],
        "nan",
    );
    // GPU devices are not available for PACO yet; bad device strings are parse errors.
    expect_error(
        &[
            "--cube", &cube, "--angles", &ang, "--psf", &psf, "-o", o, "--device", "cuda:0",
        ],
        "unavailable",
    );
    expect_error(
        &[
            "--cube", &cube, "--angles", &ang, "--psf", &psf, "-o", o, "--device", "gpu",
        ],
        "is not a device",
    );
    expect_error(
        &[
            "--cube", &cube, "--angles", &ang, "--psf", &psf, "-o", o, "--mode", "fast",
        ],
        "possible values: paper, vip",
    );
    std::fs::remove_dir_all(&out).ok();
    std::fs::remove_dir_all(&inp).ok();
}

/// Decoded RGB8 PNG: (width, height, pixels).
fn read_png(path: &std::path::Path) -> (usize, usize, Vec<[u8; 3]>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0u8; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let (w, h) = (info.width as usize, info.height as usize);
    let px = buf[..w * h * 3]
        .chunks_exact(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (w, h, px)
}

#[test]
fn subpixel_method_table8_on_the_fixture() {
    let out = tmpdir("table8");
    let o = fixture_paco(
        &out,
        &[
            "--subpixel-method",
            "table:8",
            "--edge",
            "box",
            "--fwhm",
            "4",
            "--device",
            "cpu",
            "--top",
            "5",
            "--json",
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stderr.contains("sub-pixel table:8, edge box"),
        "settings not in the run summary: {stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["subpixel"], "table:8");
    assert_eq!(json["edge"], "box");
    assert_eq!(json["mode"], "paper");
    let cands = json["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 5);
    let best = &cands[0];
    // The planet of the fixture, as with --subpixel (table:32).
    assert_eq!(
        (best["y"].as_u64(), best["x"].as_u64()),
        (Some(39), Some(45))
    );
    let snr = best["snr"].as_f64().unwrap();
    assert!(snr > 5.0, "{snr}");
    // snr.png: the 64×64 map at scale 8, the planet circled in red (S/N ≥ 5), NaN in dark
    // grey, the weaker candidates in white.
    let (w, h, px) = read_png(&out.join("snr.png"));
    assert!(w > 64 * 8 && h >= 64 * 8, "{w}×{h}");
    let (cx, cy) = (45.0 * 8.0 + 3.5, (63.0 - 39.0) * 8.0 + 3.5);
    let red: Vec<(f64, f64)> = px
        .iter()
        .enumerate()
        .filter(|(_, p)| **p == [255, 0, 0])
        .map(|(i, _)| ((i % w) as f64, (i / w) as f64))
        .collect();
    assert!(red.len() > 100, "{} red pixels", red.len());
    for &(x, y) in &red {
        let d = (x - cx).hypot(y - cy);
        assert!(
            (23.0..=26.0).contains(&d),
            "red pixel at ({x}, {y}), {d} px off"
        );
    }
    assert!(px.contains(&[40, 40, 40]), "no NaN pixels shown");
    let csv = std::fs::read_to_string(out.join("candidates.csv")).unwrap();
    assert!(csv.lines().nth(1).unwrap().starts_with("39,45,"), "{csv}");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn subpixel_method_and_edge_errors_are_clap_errors() {
    let out = tmpdir("subpix-bad");
    let o = out.to_str().unwrap();
    let cube = f("synth_adi40_64_cube.fits");
    let ang = f("synth_adi40_64_angles.fits");
    let psf = f("synth_adi40_64_psf.fits");
    let base = ["--cube", &cube, "--angles", &ang, "--psf", &psf, "-o", o];
    for (extra, needle) in [
        (&["--subpixel-method", "table:0"][..], "1..=1024"),
        (&["--subpixel-method", "table:2048"][..], "1..=1024"),
        (
            &["--subpixel-method", "bicubic"][..],
            "unknown sub-pixel method",
        ),
        (&["--subpixel-method", "fft:8"][..], "takes no :q"),
        (
            &["--subpixel", "--subpixel-method", "table:16"][..],
            "cannot be used with",
        ),
        (
            &["--exact-subpixel", "--subpixel-method", "spline5"][..],
            "cannot be used with",
        ),
        (&["--edge", "circle"][..], "invalid value"),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let r = paco(&args);
        assert_eq!(
            r.status.code(),
            Some(2),
            "clap usage error expected: {extra:?}"
        );
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(
            stderr.to_lowercase().contains(needle),
            "{needle:?} not in {stderr}"
        );
    }
    assert!(
        !out.join("snr.fits").exists(),
        "a usage error must not compute anything"
    );
    std::fs::remove_dir_all(&out).ok();
}

/// `--subpixel-method spline5` runs once the CPU implementation lands; until then it is a clear
/// "unsupported" error, never a panic.
#[test]
fn subpixel_method_spline5_runs_or_is_unsupported() {
    let out = tmpdir("spline5");
    let o = fixture_paco(
        &out,
        &[
            "--subpixel-method",
            "spline5",
            "--fwhm",
            "4",
            "--device",
            "cpu",
            "--json",
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if o.status.success() {
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(json["subpixel"], "spline5");
        let best = &json["candidates"][0];
        assert_eq!(
            (best["y"].as_u64(), best["x"].as_u64()),
            (Some(39), Some(45))
        );
    } else {
        let s = stderr.to_lowercase();
        assert!(
            s.contains("unsupported") && s.contains("spline5"),
            "unclear error: {stderr}"
        );
    }
    std::fs::remove_dir_all(&out).ok();
}

/// `--edge disk` reaches the algorithm and is reported; its valid field is never smaller than
/// VIP's box rule.
#[test]
fn edge_rule_is_passed_and_reported() {
    let mut finite = Vec::new();
    for edge in ["box", "disk"] {
        let out = tmpdir(&format!("edge-{edge}"));
        let o = fixture_paco(
            &out,
            &["--edge", edge, "--fwhm", "4", "--device", "cpu", "--json"],
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("sub-pixel off, edge {edge}")),
            "{stderr}"
        );
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(json["edge"], edge);
        assert_eq!(json["subpixel"], "off");
        let snr = fits::read_image(out.join("snr.fits")).unwrap();
        finite.push(snr.iter().filter(|v| v.is_finite()).count());
        std::fs::remove_dir_all(&out).ok();
    }
    assert!(finite[1] >= finite[0], "{finite:?}");
}

/// `--top 2 --refine --flux`: the best candidate is refined towards (39.5, 44.99) and its
/// unbiased flux is taken at the refined position.
#[test]
fn refine_candidates_and_flux_at_the_refined_position() {
    let out = tmpdir("refine");
    let o = fixture_paco(
        &out,
        &[
            "--mode",
            "vip",
            "--psf-norm-factor",
            "9.540355072844195",
            "--device",
            "cpu",
            "--top",
            "2",
            "--refine",
            "--flux",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &json["candidates"];
    let (y, x) = (
        c[0]["y_sub"].as_f64().unwrap(),
        c[0]["x_sub"].as_f64().unwrap(),
    );
    assert!(
        ((y - 39.5).powi(2) + (x - 44.99).powi(2)).sqrt() < 0.45,
        "{y} {x}"
    );
    assert!(c[0]["snr_sub"].as_f64().unwrap() > c[0]["snr"].as_f64().unwrap());
    assert!(c[1]["y_sub"].is_f64() && c.as_array().unwrap().len() == 2);
    let uf = c[0]["unbiased_flux"].as_f64().unwrap();
    assert!((uf / 572.4 - 1.0).abs() < 0.05, "{uf}");
    let csv = std::fs::read_to_string(out.join("candidates.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",unbiased_flux,unbiased_flux_err,y_sub,x_sub,snr_sub"),
        "{csv}"
    );
    std::fs::remove_dir_all(&out).ok();
}

/// `candidates.csv` writes fluxes in full, whatever their scale: the CSV's numbers are the
/// JSON's (to the ulp serde_json reads them within), on the fixture and on the fixture's cube scaled by 1e-10 (six decimals
/// wrote every flux of it as 0.000000), whose S/N is the fixture's.
#[test]
fn candidate_fluxes_are_written_in_full_at_any_scale() {
    let out = tmpdir("flux-scale");
    let cube = fits::read_image(fixtures().join("synth_adi40_64_cube.fits")).unwrap();
    let small = out.join("small.fits");
    fits::write_image(&small, &cube.mapv(|v| v * 1e-10)).unwrap();
    let mut snr = Vec::new();
    for (name, cube) in [
        ("fixture", f("synth_adi40_64_cube.fits")),
        ("small", small.display().to_string()),
    ] {
        let dir = out.join(name);
        let (angles, psf) = (
            f("synth_adi40_64_angles.fits"),
            f("synth_adi40_64_psf.fits"),
        );
        let o = paco(&[
            "--cube",
            &cube,
            "--angles",
            &angles,
            "--psf",
            &psf,
            "-o",
            dir.to_str().unwrap(),
            "--fwhm",
            "4",
            "--flux",
            "--top",
            "3",
            "--device",
            "cpu",
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let csv = std::fs::read_to_string(dir.join("candidates.csv")).unwrap();
        let mut lines = csv.lines();
        let head: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
        for (row, c) in lines.zip(json["candidates"].as_array().unwrap()) {
            let v: Vec<&str> = row.split(',').collect();
            for key in ["flux", "unbiased_flux", "unbiased_flux_err"] {
                let got: f64 = v[col(key)].parse().unwrap();
                let want = c[key].as_f64().unwrap();
                // (serde_json reads numbers to within an ulp, not always exactly)
                assert!(
                    (got - want).abs() <= 2.0 * f64::EPSILON * want.abs(),
                    "{name} {key}: {row}"
                );
                assert!(got != 0.0, "{name} {key}: {row}");
            }
            snr.push((name, c["snr"].as_f64().unwrap()));
        }
    }
    let of = |which: &str| -> Vec<f64> {
        snr.iter()
            .filter(|(n, _)| *n == which)
            .map(|(_, s)| *s)
            .collect()
    };
    let (a, b) = (of("fixture"), of("small"));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-6 * x.abs(), "{snr:?}");
    }
    std::fs::remove_dir_all(&out).ok();
}

/// The output folder is replaced as a whole: a second run into it leaves no file of the first
/// (here `snr_calibrated.fits`), a folder holding files arraybridge did not write is refused
/// with every file kept, and a run that fails writes nothing into it.
#[test]
fn the_output_folder_is_replaced_as_a_whole() {
    let out = tmpdir("whole");
    let o = fixture_paco(&out, &["--calibrate", "--top", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("snr_calibrated.fits").exists());
    assert!(out.join(".arraybridge-output").exists());
    let first = std::fs::read(out.join("candidates.csv")).unwrap();
    let o = fixture_paco(&out, &["--top", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !out.join("snr_calibrated.fits").exists(),
        "a file of the first run was left"
    );
    assert_ne!(std::fs::read(out.join("candidates.csv")).unwrap(), first);
    let parent = out.parent().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&format!("{}.", out.file_name().unwrap().to_string_lossy())))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // a folder with the user's own files (one named like an output)
    let mine = tmpdir("mine");
    std::fs::write(mine.join("a.fits"), "my a.fits").unwrap();
    std::fs::write(mine.join("notes.txt"), "my notes").unwrap();
    let o = fixture_paco(&mine, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("did not write") && err.contains("a.fits, notes.txt"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("a.fits")).unwrap(),
        "my a.fits"
    );
    // a run that fails (a bad radius, after the folder is checked) leaves it as it was
    let before = std::fs::read(out.join("candidates.csv")).unwrap();
    let o = fixture_paco(&out, &["--radius", "0"]);
    assert!(!o.status.success());
    assert_eq!(std::fs::read(out.join("candidates.csv")).unwrap(), before);
    std::fs::remove_dir_all(&out).ok();
    std::fs::remove_dir_all(&mine).ok();
}

/// A full disk mid-write (a 80 KiB tmpfs, where the maps do not fit): a clear error in the
/// operating system's words naming the final path, exit 1, and nothing left in the output
/// folder or beside it. Needs the right to mount (root, as in CI); skips otherwise.
#[test]
fn a_full_disk_is_said_in_words_and_leaves_nothing() {
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let mnt = tmpdir("tinyfs");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=80k", "tmpfs"])
        .arg(&mnt)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        let _ = std::fs::remove_dir(&mnt);
        eprintln!("skipping: cannot mount a small tmpfs here (not root)");
        return;
    }
    let _guard = Unmount(mnt.clone());
    let out = mnt.join("out");
    let o = fixture_paco(&out, &["--device", "cpu", "-q"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains(&format!("{}/", out.display())), "{err}");
    assert!(!err.contains(".partial"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // the output folder itself (made empty when checked) and nothing else
    assert!(left.iter().all(|n| n == "out"), "{left:?}");
    assert_eq!(std::fs::read_dir(&out).map(|d| d.count()).unwrap_or(0), 0);
}

/// `ARRAYBRIDGE_TRACE=1 arraybridge bench paco --device opencl:0` prints each device stage as a
/// `[trace]` span (`detect`'s format): the upload and centring, the lag tables, the statistics
/// bands, the trajectories and sums without sub-pixel templates, the bucketing and the pair
/// batches with them; with `ARRAYBRIDGE_PACO_COV=direct` no lag table, the bands say `direct`;
/// `--modes off` gives one row, and `ARRAYBRIDGE_PACO_TRAJ=device` one span per batch of
/// trajectories and sums with the number of entries left to the host.
#[test]
fn bench_paco_on_opencl_traces_its_stages() {
    let devices = Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .arg("devices")
        .output()
        .unwrap();
    if !String::from_utf8_lossy(&devices.stdout)
        .lines()
        .any(|l| l.starts_with("opencl:0"))
    {
        assert!(
            std::env::var("ARRAYBRIDGE_REQUIRE_OPENCL").as_deref() != Ok("1"),
            "ARRAYBRIDGE_REQUIRE_OPENCL=1 but no OpenCL device"
        );
        eprintln!("skipping: no OpenCL device");
        return;
    }
    for cov in ["auto", "direct"] {
        let out = Command::new(env!("CARGO_BIN_EXE_arraybridge"))
            .args(["bench", "paco", "--device", "opencl:0", "--frames", "12"])
            .args(["--size", "40", "--reps", "1"])
            .env("ARRAYBRIDGE_TRACE", "1")
            .env("ARRAYBRIDGE_PACO_COV", cov)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let spans: Vec<&str> = err
            .lines()
            .filter_map(|l| l.strip_prefix("[trace] +"))
            .filter(|l| l.contains(" s [") && l.contains("..") && l.contains("paco "))
            .collect();
        let has = |what: &str| spans.iter().any(|l| l.contains(what));
        for what in [
            "paco cube 12x40x40 converted, uploaded and centred",
            "paco trajectories 0..1600 (host)",
            "paco upload, sums and read of positions 0..1600",
            "paco pairs bucketed by pixel (host)",
            "paco pairs of pixels 0..",
        ] {
            assert!(has(what), "{cov}: no span \"{what}\" in\n{err}");
        }
        if cov == "auto" {
            assert!(has("paco lag table rows"), "{err}");
            assert!(has("(lag table)"), "{err}");
        } else {
            assert!(!has("paco lag table rows"), "{err}");
            assert!(has("(direct)") && !has("(lag table)"), "{err}");
        }
    }
    // `--modes off` times the path without templates alone; `ARRAYBRIDGE_PACO_TRAJ=device`
    // computes its trajectories on the device (the synthetic cube's first angle is 0: that
    // frame's 1600 entries are left to the host, with few others)
    let out = Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .args(["bench", "paco", "--device", "opencl:0", "--frames", "12"])
        .args(["--size", "40", "--reps", "1", "--modes", "off", "--json"])
        .env("ARRAYBRIDGE_TRACE", "1")
        .env("ARRAYBRIDGE_PACO_TRAJ", "device")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{json}");
    assert_eq!(rows[0]["what"], "paco, no sub-pixel");
    let line = err
        .lines()
        .find(|l| l.contains("paco trajectories and sums of positions 0..1600 on the device"))
        .unwrap_or_else(|| panic!("no device trajectory span in\n{err}"));
    let left: usize = line
        .split('(')
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!((1600..1600 + 200).contains(&left), "{line}");
    assert!(!err.contains("paco trajectories 0..1600 (host)"), "{err}");
}
