//! `arraybridge bench detect --movie-cache`: the synthetic movie is saved once (a `.npy` NumPy
//! reads, and its ground truth) and read back by later runs, whole or its first frames, with the
//! results of a movie generated afresh; what is saved but broken is generated again, never used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use algorithms::detect::Movie;
use algorithms::detect::synth::synthetic_movie;

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-bench-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The rows of `bench detect --json` that do not depend on timing.
fn bench(frames: &str, cache: Option<&Path>, extra: &[&str]) -> (Vec<serde_json::Value>, String) {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "--json",
        "bench",
        "detect",
        "--device",
        "cpu",
        "--frames",
        frames,
        "--size",
        "48",
        "--particles",
        "6",
        "--batch-sizes",
        "2",
    ])
    .args(extra);
    if let Some(c) = cache {
        cmd.arg("--movie-cache").arg(c);
    }
    let out = cmd.output().expect("arraybridge runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    if extra.contains(&"--prepare-only") {
        assert!(out.stdout.is_empty(), "--prepare-only prints no figures");
        return (vec![], stderr);
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rows = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            serde_json::json!({
                "frames": r["frames"], "detections": r["detections"], "recall": r["recall"],
                "precision": r["precision"], "rmse_px": r["rmse_px"],
            })
        })
        .collect();
    (rows, stderr)
}

#[test]
fn the_saved_movie_is_the_generated_one_and_serves_shorter_runs() {
    let d = tmpdir("serve");
    let (_, note) = bench("5", Some(&d), &["--prepare-only"]);
    assert!(note.contains("movie saved to"), "{note}");
    let npy = d.join("synth-u16-48-p6-seed1.npy");
    // what NumPy would read is the generator's movie, frame for frame
    let saved = arraybridge::io::npy::read_movie(&npy).expect("a .npy movie");
    let fresh = synthetic_movie(5, 48, 6, 1.0, 1);
    match (&saved, &fresh.movie) {
        (Movie::U16(a), Movie::U16(b)) => assert_eq!(a, b),
        _ => panic!("u16 movies"),
    }
    // a shorter run reads the first frames and scores against their truth: the same rows as
    // a run that generates its movie
    for frames in ["5", "3"] {
        let (cached, note) = bench(frames, Some(&d), &[]);
        assert!(note.contains("movie read from"), "{note}");
        let (plain, _) = bench(frames, None, &[]);
        assert_eq!(cached, plain, "--frames {frames}");
    }
    // a longer run generates (and saves) the longer movie
    let (_, note) = bench("7", Some(&d), &["--prepare-only"]);
    assert!(note.contains("movie saved to"), "{note}");
    let (_, note) = bench("6", Some(&d), &["--prepare-only"]);
    assert!(note.contains("movie read from"), "{note}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_broken_saved_movie_is_generated_again() {
    let d = tmpdir("broken");
    bench("4", Some(&d), &["--prepare-only"]);
    let truth = d.join("synth-u16-48-p6-seed1.truth.npy");
    let bytes = std::fs::read(&truth).unwrap();
    // a truth table cut short
    std::fs::write(&truth, &bytes[..bytes.len() - 8]).unwrap();
    let (rows, note) = bench("4", Some(&d), &[]);
    assert!(note.contains("is not usable"), "{note}");
    assert!(note.contains("movie saved to"), "{note}");
    assert_eq!(rows, bench("4", None, &[]).0);
    // a movie that is not what its name says (f64 frames) is not read either
    std::fs::write(
        d.join("synth-u16-48-p6-seed1.npy"),
        arraybridge::io::npy::encode_npy("<f8", &[4, 48, 48], &vec![0u8; 4 * 48 * 48 * 8]),
    )
    .unwrap();
    let (_, note) = bench("4", Some(&d), &[]);
    assert!(note.contains("is not usable"), "{note}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn prepare_only_needs_a_cache() {
    let out = Command::new(BIN)
        .args(["bench", "detect", "--device", "cpu", "--prepare-only"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--movie-cache"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
