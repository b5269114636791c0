//! Usage a command line meets that a test run does not (a third probing, 2026-11-28): a closed
//! or full standard output or error, a tuning variable that is not understood, a flag of the
//! other detection method, a folder of frames with an entry that is not a frame file or a
//! name like a file's, sizes the synthetic inputs cannot take. Each ends with a clear message
//! and an exit code, never a panic (exit 101) or a silently changed result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-usage-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn arraybridge(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args).env_remove("ARRAYBRIDGE_MEMORY_LIMIT_MB");
    c
}

fn run(args: &[&str]) -> Output {
    let out = arraybridge(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "panic on {args:?}: {stderr}");
    out
}

/// Fails with exit 1 or 2, and stderr holds every needle.
fn fails(args: &[&str], needles: &[&str]) -> String {
    let o = run(args);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "{args:?}: {:?}\n{stderr}",
        o.status
    );
    for n in needles {
        assert!(
            stderr.contains(n),
            "{n:?} not in the error of {args:?}:\n{stderr}"
        );
    }
    stderr
}

/// A small u8 movie of bright spots on noise, as `.npy`.
fn movie(dir: &Path) -> PathBuf {
    let (t, h, w) = (3usize, 48usize, 48usize);
    let mut px = Vec::with_capacity(t * h * w);
    let mut state = 12345u32;
    for f in 0..t {
        for y in 0..h {
            for x in 0..w {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let noise = (state >> 16) % 20;
                let spot = [(12, 12), (30, 34)].iter().any(|&(sy, sx)| {
                    (y as i64 - sy - f as i64).abs() <= 1 && (x as i64 - sx).abs() <= 1
                });
                px.push(if spot { 220 } else { 10 + noise as u8 });
            }
        }
    }
    let p = dir.join("m.npy");
    std::fs::write(&p, arraybridge::io::npy::encode_npy("|u1", &[t, h, w], &px)).unwrap();
    p
}

#[test]
fn a_closed_standard_output_ends_quietly_and_a_full_one_is_an_error() {
    // the reader of the pipe is gone before anything is written
    let mut child = arraybridge(&["devices"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let help = run(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("detect"));
    assert_eq!(run(&["detect", "--no-such-flag"]).status.code(), Some(2));
    if Path::new("/dev/full").exists() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = arraybridge(&["--help"]).stdout(full).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        for args in [&["devices"][..], &["devices", "--json"][..]] {
            let full = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap();
            let out = arraybridge(args).stdout(full).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("standard output"), "{stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
        // a full standard error is ignored: the run succeeds
        let d = tmpdir("stderr");
        let m = movie(&d);
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let csv = d.join("o.csv");
        let out = arraybridge(&[
            "detect",
            m.to_str().unwrap(),
            "-o",
            csv.to_str().unwrap(),
            "--device",
            "cpu",
            "--max-sigma",
            "3",
        ])
        .stderr(full)
        .output()
        .unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        assert!(csv.is_file());
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn a_tuning_variable_that_is_not_understood_is_a_warning_once() {
    let out = arraybridge(&["devices"])
        .env("ARRAYBRIDGE_DETECT_WG_X", "garbage")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warning = "warning: ARRAYBRIDGE_DETECT_WG_X=\"garbage\"";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    // --quiet hides warnings
    let out = arraybridge(&["-q", "devices"])
        .env("ARRAYBRIDGE_DETECT_WG_X", "garbage")
        .output()
        .unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn detect_refuses_the_flags_of_the_other_method() {
    let d = tmpdir("methods");
    let m = movie(&d);
    let (m, o) = (m.to_str().unwrap(), d.join("o.csv"));
    let o = o.to_str().unwrap();
    for flag in [
        &["--diameter", "7"][..],
        &["--minmass", "100"],
        &["--topn", "3"],
        &["--invert"],
        &["--no-preprocess"],
    ] {
        let mut args = vec!["detect", m, "-o", o, "--device", "cpu"];
        args.extend_from_slice(flag);
        fails(&args, &[flag[0], "--method locate"]);
    }
    for flag in [
        &["--max-sigma", "3"][..],
        &["--threshold-rel", "0.9"],
        &["--refine"],
        &["--fast"],
        &["--prescale", "minmax"],
        &["--log-scale"],
    ] {
        let mut args = vec![
            "detect", m, "-o", o, "--device", "cpu", "--method", "locate",
        ];
        args.extend_from_slice(&["--diameter", "7"]);
        args.extend_from_slice(flag);
        fails(&args, &[flag[0], "--method locate"]);
    }
    assert!(!Path::new(o).exists(), "an output was written");
    // each method with its own flags runs
    for args in [
        &["--max-sigma", "3", "--threshold-rel", "0.2"][..],
        &["--method", "locate", "--diameter", "7", "--minmass", "10"],
    ] {
        let mut all = vec!["detect", m, "-o", o, "--device", "cpu", "-q"];
        all.extend_from_slice(args);
        let out = run(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// `n` single-frame PNGs `f0.png`… in `dir`, from the movie's first frame.
fn png_frames(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let f = std::fs::File::create(dir.join(format!("f{i}.png"))).unwrap();
        let mut enc = png::Encoder::new(f, 32, 32);
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::Eight);
        let px: Vec<u8> = (0..32 * 32)
            .map(|p| {
                if (p / 32 + i) % 32 == 16 && p % 32 == 16 {
                    250
                } else {
                    (p % 7) as u8 * 3
                }
            })
            .collect();
        enc.write_header().unwrap().write_image_data(&px).unwrap();
    }
}

#[cfg(unix)]
#[test]
fn a_folder_with_an_entry_that_is_not_a_frame_file_is_refused() {
    let d = tmpdir("folder");
    let frames = d.join("frames");
    png_frames(&frames, 3);
    std::os::unix::fs::symlink("/nonexistent/x.png", frames.join("f1b.png")).unwrap();
    let o = d.join("o.csv");
    let (f, o) = (frames.to_str().unwrap(), o.to_str().unwrap());
    fails(
        &["detect", f, "-o", o, "--device", "cpu", "--max-sigma", "3"],
        &["f1b.png", "dangling"],
    );
    std::fs::remove_file(frames.join("f1b.png")).unwrap();
    std::fs::create_dir(frames.join("f1b.png")).unwrap();
    fails(
        &["detect", f, "-o", o, "--device", "cpu", "--max-sigma", "3"],
        &["f1b.png", "a folder"],
    );
    assert!(!Path::new(o).exists());
    // a folder named like a file is a folder of frames
    let named = d.join("run.tif");
    png_frames(&named, 2);
    let out = run(&[
        "detect",
        named.to_str().unwrap(),
        "-o",
        o,
        "--device",
        "cpu",
        "-q",
        "--max-sigma",
        "3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sizes_the_synthetic_inputs_cannot_take_are_refused_up_front() {
    fails(
        &[
            "bench", "paco", "--frames", "2", "--size", "16", "--device", "cpu",
        ],
        &["--size"],
    );
    fails(
        &[
            "bench", "scaling", "paco", "--device", "cpu", "--frames", "2", "--size", "16",
            "--no-mpi",
        ],
        &["--size", "21"],
    );
    let d = tmpdir("memory");
    let csv = d.join("t.csv");
    std::fs::write(&csv, "frame,y,x\n0,1,1\n1,1,2\n").unwrap();
    let o = d.join("o.csv");
    for extra in [&[][..], &["--strategy", "greedy"]] {
        let mut args = vec![
            "track",
            csv.to_str().unwrap(),
            "-o",
            o.to_str().unwrap(),
            "--search-range",
            "3",
            "--memory",
            "99999999999999999",
        ];
        args.extend_from_slice(extra);
        fails(&args, &["--memory", "unreasonably large"]);
    }
    // the parent of -o is a file
    fails(
        &[
            "track",
            csv.to_str().unwrap(),
            "-o",
            &format!("{}/o.csv", csv.display()),
            "--search-range",
            "3",
        ],
        &["is a file, not a folder"],
    );
    let _ = std::fs::remove_dir_all(&d);
}
