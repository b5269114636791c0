//! `detect a b c --out-dir DIR` in one process: one CSV per input named from its stem,
//! byte-identical to one-input runs, no partial file left; two inputs with the same stem and
//! several inputs without `--out-dir` are errors before any work; a corrupt input ends the run
//! naming it, or with `--keep-going` is listed at the end (non-zero exit) while the others are
//! written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn arraybridge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .args(args)
        .env("POCL_DEVICES", "pthread pthread")
        .output()
        .unwrap()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture(name: &str) -> String {
    test_support::fixtures::path("detect")
        .join(name)
        .display()
        .to_string()
}

/// Three inputs of different sizes and dtypes (stems movie_u16, hisnr_u16, hisnr_f32).
fn inputs() -> Vec<String> {
    vec![
        fixture("movie/movie_u16.npy"),
        fixture("blob_log/hisnr_u16.npy"),
        fixture("blob_log/hisnr_f32.npy"),
    ]
}

const PARAMS: [&str; 6] = [
    "--max-sigma",
    "3",
    "--threshold",
    "none",
    "--threshold-rel",
    "0.2",
];

/// `detect INPUTS OUT PARAMS EXTRA`, on the CPU unless `extra` names a device.
fn detect(inputs: &[String], out: &[&str], extra: &[&str]) -> Output {
    let mut args: Vec<&str> = vec!["detect"];
    args.extend(inputs.iter().map(String::as_str));
    args.extend(out);
    args.extend(PARAMS);
    if !extra.contains(&"--device") {
        args.extend(["--device", "cpu"]);
    }
    args.extend(extra);
    arraybridge(&args)
}

fn stem(p: &str) -> String {
    Path::new(p)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The CSV of a one-input run (`-o`) on `device`.
fn one_run(dir: &Path, input: &str, device: &str) -> Vec<u8> {
    let out = dir.join(format!("one-{}-{device}.csv", stem(input)));
    let o = detect(
        &[input.to_string()],
        &["-o", out.to_str().unwrap()],
        &["--device", device],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(out).unwrap()
}

fn no_partial_file(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".part"), "a partial file is left: {name}");
    }
}

#[test]
fn three_inputs_write_the_csvs_of_one_input_runs() {
    let dir = tmpdir("three");
    let out = dir.join("out");
    let inputs = inputs();
    let o = detect(&inputs, &["--out-dir", out.to_str().unwrap()], &["--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 3, "{v}");
    assert_eq!(v["failed"].as_array().unwrap().len(), 0, "{v}");
    for (input, f) in inputs.iter().zip(files) {
        let csv = out.join(format!("{}.csv", stem(input)));
        assert_eq!(f["input"], input.as_str(), "{f}");
        assert_eq!(f["output"], csv.to_str().unwrap(), "{f}");
        assert_eq!(f["device"], "cpu", "{f}");
        assert!(f["frames"].as_u64().unwrap() >= 1, "{f}");
        assert!(f["seconds"].as_f64().unwrap() > 0.0, "{f}");
        let got = std::fs::read(&csv).unwrap();
        let rows = got.iter().filter(|&&b| b == b'\n').count() as u64;
        assert_eq!(f["detections"].as_u64().unwrap() + 1, rows, "{f}");
        assert!(
            got == one_run(&dir, input, "cpu"),
            "{input}: the CSV differs from a one-input run"
        );
    }
    no_partial_file(&out);
    // the summary names every input and output
    let o = detect(&inputs, &["--out-dir", out.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("3 inputs (0 failed)"), "{err}");
    assert!(err.contains("hisnr_f32.csv: 1 frames"), "{err}");
}

#[test]
fn several_inputs_need_out_dir_and_distinct_stems() {
    let dir = tmpdir("grammar");
    let inputs = inputs();
    let x = dir.join("x.csv");
    // several inputs with -o, or none of -o and --out-dir
    let o = detect(&inputs, &["-o", x.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("3 inputs need --out-dir"), "{err}");
    let o = detect(&inputs[..1], &[], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("-o FILE"), "{err}");
    // -o and --out-dir together: a usage error
    let o = detect(&inputs[..1], &["-o", "x.csv", "--out-dir", "d"], &[]);
    assert_eq!(o.status.code(), Some(2));
    // two inputs with the same stem (.npy and .tif of one movie): an error before any work
    let out = dir.join("out");
    let same = vec![
        fixture("movie/movie_u16.npy"),
        fixture("blob_log/hisnr_u16.npy"),
        fixture("movie/movie_u16.tif"),
    ];
    let o = detect(&same, &["--out-dir", out.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("would both write") && err.contains("movie_u16.csv"),
        "{err}"
    );
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none());
}

#[test]
fn a_corrupt_input_stops_the_run_or_is_listed_with_keep_going() {
    let dir = tmpdir("corrupt");
    let bad = dir.join("bad.npy");
    std::fs::write(&bad, b"\x93NUMPY\x01\x00garbage that is no header").unwrap();
    let inputs = inputs();
    let with_bad = vec![
        inputs[0].clone(),
        bad.display().to_string(),
        inputs[2].clone(),
    ];
    // without --keep-going: the run ends at the bad input, naming it; no partial file
    let out = dir.join("stop");
    let o = detect(&with_bad, &["--out-dir", out.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("bad.npy"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.join("bad.csv").exists());
    assert!(!out.join("hisnr_f32.csv").exists(), "the run went on");
    no_partial_file(&out);
    // with --keep-going: the others are written, the failure listed, the exit status non-zero
    let out = dir.join("keep");
    let o = detect(
        &with_bad,
        &["--out-dir", out.to_str().unwrap()],
        &["--keep-going", "--json"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("1 of 3 inputs failed") && err.contains("bad.npy"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["failed"][0], bad.to_str().unwrap(), "{v}");
    assert!(
        v["files"][1]["error"].as_str().unwrap().contains("bad.npy"),
        "{v}"
    );
    assert!(!out.join("bad.csv").exists());
    no_partial_file(&out);
    for input in [&inputs[0], &inputs[2]] {
        let got = std::fs::read(out.join(format!("{}.csv", stem(input)))).unwrap();
        assert!(got == one_run(&dir, input, "cpu"), "{input}");
    }
}

#[test]
fn several_inputs_on_two_devices_are_each_shared() {
    let out = arraybridge(&["devices"]);
    if !String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("opencl:1"))
    {
        eprintln!("skipping: fewer than two OpenCL devices");
        return;
    }
    let dir = tmpdir("two");
    let out = dir.join("out");
    let inputs = inputs();
    let o = detect(
        &inputs[..2],
        &["--out-dir", out.to_str().unwrap()],
        &["--device", "opencl:0,opencl:1", "--json"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["device"], "opencl:0,opencl:1", "{v}");
    for input in &inputs[..2] {
        let got = std::fs::read(out.join(format!("{}.csv", stem(input)))).unwrap();
        assert!(got == one_run(&dir, input, "opencl:0"), "{input}");
    }
}
