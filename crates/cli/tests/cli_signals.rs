//! SIGTERM and SIGINT during `arraybridge track`: the process exits with 128 + the signal
//! (143, 130), leaves no temporary `.NAME.PID.partial` file beside its output, and a previous
//! output at `-o` stays byte-identical.
//!
//! The input is a named pipe the test keeps open: the run cannot end before the signal comes,
//! whatever the machine's load. Every wait polls up to a deadline; a hang fails the test.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

/// The deadline of every wait.
const DEADLINE: Duration = Duration::from_secs(60);

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-signals-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The names of the `.partial` files in `dir`.
fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".partial"))
        .collect()
}

/// Wait for `child` at most [`DEADLINE`] (killed and failed past it).
fn wait(child: &mut Child, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {DEADLINE:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A few frames of 60 particles drifting 0.1 px per frame on a 20 px grid.
fn rows(frames: std::ops::Range<usize>) -> String {
    let mut s = String::new();
    for t in frames {
        for k in 0..60 {
            let d = 0.1 * t as f64;
            s += &format!(
                "{t},{:.3},{:.3}\n",
                20.0 * (k / 10) as f64 + d,
                20.0 * (k % 10) as f64 + d
            );
        }
    }
    s
}

/// `track` reading a named pipe that stays open, stopped by `kill -SIGNAL` once its output's
/// temporary file exists: it must exit with `code`, leave no `.partial` file and keep the
/// previous output.
fn interrupted(signal: &str, code: i32) {
    let d = tmpdir(signal);
    let fifo = d.join("in.csv");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    // read and write: opening does not wait for a reader, and the pipe never reaches its end
    let mut pipe = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    // under the pipe's 64 KiB: written before the reader comes without blocking
    let data = format!("frame,y,x\n{}", rows(0..40));
    assert!(data.len() < 60_000, "{}", data.len());
    pipe.write_all(data.as_bytes()).unwrap();

    let out = d.join("out.csv");
    let previous = b"frame,y,x,particle\n0,1,2,3\n".to_vec();
    std::fs::write(&out, &previous).unwrap();
    let err = d.join("stderr.txt");
    let mut child = Command::new(BIN)
        .args(["track", fifo.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .args(["--search-range", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();

    let start = Instant::now();
    while partials(&d).is_empty() {
        if let Some(s) = child.try_wait().unwrap() {
            panic!(
                "track ended ({s}) before its output was started: {}",
                std::fs::read_to_string(&err).unwrap()
            );
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no .partial file after {DEADLINE:?}: {:?}", partials(&d));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} failed");
    let status = wait(&mut child, signal);
    drop(pipe);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert_eq!(status.code(), Some(code), "{status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(partials(&d), Vec::<String>::new(), "temporary files left");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        previous,
        "previous output changed"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sigterm_removes_the_partial_output_and_exits_143() {
    interrupted("TERM", 143);
}

#[test]
fn sigint_removes_the_partial_output_and_exits_130() {
    interrupted("INT", 130);
}

#[test]
fn sighup_removes_the_partial_output_and_exits_129() {
    // a closed terminal: it used to leave `.out.csv.PID.partial` behind
    interrupted("HUP", 129);
}
