//! The helpers of the `track` end-to-end tests (`cli_track.rs`, `cli_track_stream.rs`): runs
//! of the binary with a deadline, output parsing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

/// The deadline of one run of the binary.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-track-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub struct Run {
    pub ok: bool,
    pub stderr: String,
    pub secs: f64,
}

/// Run the binary with a deadline (killed and failed past it); stderr must not show a panic.
pub fn run(dir: &Path, args: &[&str]) -> Run {
    run_env(dir, args, &[])
}

/// [`run`] with extra environment variables.
pub fn run_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let (out, err) = (dir.join("stdout.txt"), dir.join("stderr.txt"));
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {DEADLINE:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let secs = start.elapsed().as_secs_f64();
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    Run {
        ok: status.success(),
        stderr,
        secs,
    }
}

/// `track IN -o OUT --search-range 5 EXTRA…` on `csv` written to `dir/in.csv`.
pub fn track(dir: &Path, csv: &[u8], extra: &[&str]) -> Run {
    let inp = dir.join("in.csv");
    std::fs::write(&inp, csv).unwrap();
    let out = dir.join("out.csv");
    let mut args = vec![
        "track",
        inp.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--search-range",
        "5",
    ];
    args.extend_from_slice(extra);
    run(dir, &args)
}

/// Fails with an error message containing every one of `needles`.
pub fn fails_with(dir: &Path, csv: &[u8], extra: &[&str], needles: &[&str]) {
    let r = track(dir, csv, extra);
    assert!(!r.ok, "should fail: {}", String::from_utf8_lossy(csv));
    assert!(r.stderr.contains("error"), "{}", r.stderr);
    for n in needles {
        assert!(r.stderr.contains(n), "{n:?} not in: {}", r.stderr);
    }
}

/// The `particle` column of an output CSV (plain numeric fields: split on commas is enough).
pub fn particles(path: &Path) -> Vec<i64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(*header.last().unwrap(), "particle");
    lines
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect()
}

pub fn partition(ids: &[i64]) -> BTreeSet<Vec<usize>> {
    let mut m: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, &id) in ids.iter().enumerate() {
        m.entry(id).or_default().push(i);
    }
    m.into_values().collect()
}

/// `fixtures/track/<name>` without its golden `particle` column (written to `dir/in.csv`),
/// and the golden ids.
pub fn track_fixture(dir: &Path, name: &str) -> (PathBuf, Vec<i64>) {
    let text = std::fs::read_to_string(test_support::fixtures::path("track").join(name)).unwrap();
    let mut csv = String::new();
    let mut golden = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let (head, id) = l.rsplit_once(',').unwrap();
        csv += head;
        csv.push('\n');
        if i > 0 {
            golden.push(id.parse().unwrap());
        }
    }
    let inp = dir.join("in.csv");
    std::fs::write(&inp, csv).unwrap();
    (inp, golden)
}

/// The JSON summary of the last run (`--json`).
pub fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("stdout.txt")).unwrap()).unwrap()
}
