//! `mpirun -n N arraybridge paco|detect` (the `mpi` feature): the files are byte-identical to
//! one process's, with 2 and 3 ranks (paco without and with sub-pixel templates, detect over
//! several chunks, `--method log` and `locate`); a bad device and a
//! missing input end every rank quickly with the message and a non-zero status; commands other
//! than `paco` and `detect` refuse to run on several ranks. Skips (printing why) without `mpirun`; fails
//! instead under `ARRAYBRIDGE_REQUIRE_MPI=1` (scripts/test.sh sets it where `mpirun` exists).
#![cfg(feature = "mpi")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest any run here may take before it counts as a hang.
const LIMIT: Duration = Duration::from_secs(180);

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_arraybridge")
}

/// Whether `mpirun` is there; a printed skip otherwise (a failure under REQUIRE_MPI).
fn have_mpirun() -> bool {
    let ok = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("ARRAYBRIDGE_REQUIRE_MPI").as_deref() != Ok("1"),
            "ARRAYBRIDGE_REQUIRE_MPI=1 but mpirun does not run"
        );
        eprintln!("skipping: mpirun not found (install openmpi-bin)");
    }
    ok
}

/// Wait for `cmd` at most [`LIMIT`]; a hang is a test failure (the processes are killed).
fn output_within(mut cmd: Command) -> (Output, Duration) {
    let t = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), t.elapsed());
        }
        if t.elapsed() > LIMIT {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "hang: still running after {LIMIT:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `mpirun -n ranks arraybridge args` (as root too, more ranks than cores allowed).
fn mpirun(ranks: usize, args: &[&str]) -> (Output, Duration) {
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "-n",
        &ranks.to_string(),
        "--oversubscribe",
        "--allow-run-as-root",
    ])
    .arg(bin())
    .args(args)
    .env("POCL_DEVICES", "pthread")
    // containers often forbid cross-memory attach; shared-memory copies still work
    .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    output_within(cmd)
}

fn single(args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("POCL_DEVICES", "pthread");
    output_within(cmd).0
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-mpi-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture(name: &str) -> String {
    test_support::fixtures::path("paco")
        .join(name)
        .display()
        .to_string()
}

fn paco_args<'a>(inputs: &'a [String; 3], out: &'a str, device: &'a str) -> Vec<&'a str> {
    vec![
        "paco", "--cube", &inputs[0], "--angles", &inputs[1], "--psf", &inputs[2], "-o", out,
        "--device", device,
    ]
}

fn inputs() -> [String; 3] {
    [
        fixture("synth_adi40_64_cube.fits"),
        fixture("synth_adi40_64_angles.fits"),
        fixture("synth_adi40_64_psf.fits"),
    ]
}

fn same_files(one: &Path, other: &Path, what: &str) {
    for f in [
        "snr.fits",
        "flux.fits",
        "a.fits",
        "b.fits",
        "candidates.csv",
        "snr.png",
    ] {
        assert!(
            std::fs::read(one.join(f)).unwrap() == std::fs::read(other.join(f)).unwrap(),
            "{what}: {f} differs from the single process's"
        );
    }
}

/// Whether one PoCL device is there (a skip otherwise, a failure under REQUIRE_OPENCL).
fn have_opencl() -> bool {
    let out = single(&["devices"]);
    let ok = String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("opencl:0"));
    if !ok {
        assert!(
            std::env::var("ARRAYBRIDGE_REQUIRE_OPENCL").as_deref() != Ok("1"),
            "ARRAYBRIDGE_REQUIRE_OPENCL=1 but no OpenCL device"
        );
        eprintln!("skipping the OpenCL part: no OpenCL device");
    }
    ok
}

#[test]
fn paco_on_ranks_writes_the_same_files_as_one_process() {
    if !have_mpirun() {
        return;
    }
    let dir = tmpdir("same");
    let inputs = inputs();
    let one = dir.join("one");
    let o = single(&paco_args(&inputs, one.to_str().unwrap(), "cpu"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for n in [2, 3] {
        let out = dir.join(format!("ranks{n}"));
        let (o, took) = mpirun(n, &paco_args(&inputs, out.to_str().unwrap(), "cpu"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{n} ranks: {err}");
        assert!(err.contains(&format!("{n} MPI ranks")), "{err}");
        assert!(
            err.contains(&format!("rank {} cpu: ", n - 1)),
            "each rank's share: {err}"
        );
        same_files(&one, &out, &format!("{n} ranks"));
        eprintln!("{n} ranks: {took:?}");
    }
    // the JSON names each rank; every rank did some of the work
    let out = dir.join("json");
    let mut args = paco_args(&inputs, out.to_str().unwrap(), "cpu");
    args.extend(["--json", "-q"]);
    let (o, _) = mpirun(2, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let shares = v["devices"].as_array().unwrap();
    assert_eq!(shares.len(), 2, "{v}");
    assert_eq!(shares[1]["rank"], 1);
    assert!(
        shares.iter().all(|s| s["units"].as_u64().unwrap() > 0),
        "{v}"
    );
}

#[test]
fn paco_with_templates_on_opencl_ranks_writes_the_same_files() {
    if !have_mpirun() || !have_opencl() {
        return;
    }
    let dir = tmpdir("templates");
    let inputs = inputs();
    let one = dir.join("one");
    let mut args = paco_args(&inputs, one.to_str().unwrap(), "opencl:0");
    args.push("--subpixel");
    let o = single(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let two = dir.join("two");
    let mut args = paco_args(&inputs, two.to_str().unwrap(), "opencl:0");
    args.push("--subpixel");
    let (o, _) = mpirun(2, &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("rank 1 opencl:0: "), "{err}");
    same_files(&one, &two, "templates on 2 ranks");
}

#[test]
fn failures_end_every_rank_with_the_message() {
    if !have_mpirun() {
        return;
    }
    let dir = tmpdir("fail");
    let inputs = inputs();
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let fails = |n: usize, args: &[&str], want: &str| {
        let (o, took) = mpirun(n, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} should fail: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(took < Duration::from_secs(60), "{args:?} took {took:?}");
    };
    // a device no rank has
    fails(2, &paco_args(&inputs, out, "opencl:9"), "opencl:9");
    // an input rank 0 cannot read
    let mut missing = inputs.clone();
    missing[0] = dir.join("nope.fits").display().to_string();
    fails(3, &paco_args(&missing, out, "cpu"), "nope.fits");
    // only paco runs across ranks
    fails(
        2,
        &["devices"],
        "only `paco` and `detect` run across MPI ranks",
    );
    // a detection device no rank has (log and locate)
    let movie = movie();
    let csv = dir.join("x.csv");
    let csv = csv.to_str().unwrap();
    fails(
        2,
        &["detect", &movie, "-o", csv, "--device", "opencl:9"],
        "opencl:9",
    );
    fails(
        2,
        &[
            "detect",
            &movie,
            "-o",
            csv,
            "--method",
            "locate",
            "--diameter",
            "7",
            "--device",
            "opencl:9",
        ],
        "opencl:9",
    );
    // one rank is a normal run
    let (o, _) = mpirun(1, &["devices"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn movie() -> String {
    test_support::fixtures::path("detect/movie/movie_u16.npy")
        .display()
        .to_string()
}

#[test]
fn detect_on_ranks_writes_the_same_csv_as_one_process() {
    if !have_mpirun() {
        return;
    }
    let dir = tmpdir("detect");
    let movie = movie();
    let run_args = |out: &Path| -> Vec<String> {
        [
            "detect",
            &movie,
            "-o",
            out.to_str().unwrap(),
            "--device",
            "cpu",
            "--max-sigma",
            "3",
            "--threshold",
            "none",
            "--threshold-rel",
            "0.2",
            "--refine",
            "--batch-size",
            "2",
            "--chunk-frames",
            "7",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let one = dir.join("one.csv");
    let a = run_args(&one);
    let o = single(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for n in [2, 3] {
        let out = dir.join(format!("ranks{n}.csv"));
        let a = run_args(&out);
        let (o, took) = mpirun(n, &a.iter().map(String::as_str).collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{n} ranks: {err}");
        assert!(err.contains(&format!("{n} MPI ranks")), "{err}");
        assert!(err.contains(&format!("rank {} cpu: ", n - 1)), "{err}");
        assert!(
            std::fs::read(&one).unwrap() == std::fs::read(&out).unwrap(),
            "{n} ranks: the CSV differs from the single process's"
        );
        eprintln!("detect on {n} ranks: {took:?}");
    }
}

/// Four inputs (stems movie_u16, hisnr_u16, hisnr_f32, movie_tif) and a folder for them.
fn four_inputs(dir: &Path) -> Vec<String> {
    let tif = dir.join("movie_tif.tif");
    std::fs::copy(
        test_support::fixtures::path("detect/movie/movie_u16.tif"),
        &tif,
    )
    .unwrap();
    let blob = |n: &str| {
        test_support::fixtures::path("detect/blob_log")
            .join(n)
            .display()
            .to_string()
    };
    vec![
        movie(),
        blob("hisnr_u16.npy"),
        blob("hisnr_f32.npy"),
        tif.display().to_string(),
    ]
}

fn files_args<'a>(inputs: &'a [String], out: &'a str) -> Vec<&'a str> {
    let mut a = vec!["detect"];
    a.extend(inputs.iter().map(String::as_str));
    a.extend([
        "--out-dir",
        out,
        "--device",
        "cpu",
        "--max-sigma",
        "3",
        "--threshold",
        "none",
        "--threshold-rel",
        "0.2",
    ]);
    a
}

#[test]
fn files_on_ranks_write_the_csvs_of_one_process() {
    if !have_mpirun() {
        return;
    }
    let dir = tmpdir("files");
    let inputs = four_inputs(&dir);
    let one = dir.join("one");
    let o = single(&files_args(&inputs, one.to_str().unwrap()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stems = ["movie_u16", "hisnr_u16", "hisnr_f32", "movie_tif"];
    for (n, files) in [(2, 3), (3, 4)] {
        let out = dir.join(format!("ranks{n}"));
        let mut args = files_args(&inputs[..files], out.to_str().unwrap());
        args.push("--json");
        let (o, took) = mpirun(n, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{n} ranks: {err}");
        assert!(err.contains(&format!("over {n} MPI ranks")), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let reports = v["files"].as_array().unwrap();
        assert_eq!(reports.len(), files, "{v}");
        for (stem, r) in stems.iter().zip(reports) {
            assert!(r["rank"].as_u64().unwrap() < n as u64, "{r}");
            let name = format!("{stem}.csv");
            assert!(
                std::fs::read(one.join(&name)).unwrap() == std::fs::read(out.join(&name)).unwrap(),
                "{n} ranks: {name} differs from the single process's"
            );
        }
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
        assert_eq!(left.len(), files, "partial files left in {out:?}");
        eprintln!("{files} files on {n} ranks: {took:?}");
    }
}

#[test]
fn a_corrupt_file_ends_every_rank_or_is_listed_with_keep_going() {
    if !have_mpirun() {
        return;
    }
    let dir = tmpdir("files-bad");
    let mut inputs = four_inputs(&dir);
    let bad = dir.join("bad.npy");
    std::fs::write(&bad, b"\x93NUMPY\x01\x00garbage that is no header").unwrap();
    inputs[1] = bad.display().to_string();
    let out = dir.join("stop");
    let (o, took) = mpirun(3, &files_args(&inputs, out.to_str().unwrap()));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("bad.npy"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(!out.join("bad.csv").exists());
    // --keep-going: the others are written, the failure listed, a non-zero status
    let out = dir.join("keep");
    let mut args = files_args(&inputs, out.to_str().unwrap());
    args.push("--keep-going");
    let (o, _) = mpirun(2, &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("1 of 4 inputs failed"), "{err}");
    for stem in ["movie_u16", "hisnr_f32", "movie_tif"] {
        assert!(out.join(format!("{stem}.csv")).exists(), "{stem}: {err}");
    }
    assert!(!out.join("bad.csv").exists());
}

#[test]
fn locate_on_ranks_writes_the_same_csv_as_one_process() {
    if !have_mpirun() {
        return;
    }
    let dir = tmpdir("locate");
    let movie = movie();
    let run_args = |out: &Path| -> Vec<String> {
        [
            "detect",
            &movie,
            "-o",
            out.to_str().unwrap(),
            "--device",
            "cpu",
            "--method",
            "locate",
            "--diameter",
            "7",
            "--batch-size",
            "1",
            "--chunk-frames",
            "4",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let one = dir.join("one.csv");
    let a = run_args(&one);
    let o = single(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&one).unwrap().len() > 200, "features found");
    for n in [2, 3] {
        let out = dir.join(format!("ranks{n}.csv"));
        let a = run_args(&out);
        let (o, took) = mpirun(n, &a.iter().map(String::as_str).collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{n} ranks: {err}");
        assert!(err.contains(&format!("{n} MPI ranks")), "{err}");
        assert!(err.contains("method locate"), "{err}");
        assert!(err.contains(&format!("rank {} cpu: ", n - 1)), "{err}");
        assert!(
            std::fs::read(&one).unwrap() == std::fs::read(&out).unwrap(),
            "{n} ranks: the CSV differs from the single process's"
        );
        eprintln!("locate on {n} ranks: {took:?}");
    }
}
