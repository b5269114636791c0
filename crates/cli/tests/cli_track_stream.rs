//! End-to-end tests of `arraybridge track` streaming: rows in frame order (or `--unsorted`),
//! the same bytes as the whole-table path, memory bounded by a frame's rows. Every run has a
//! deadline: a hang fails the test instead of hanging it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod track_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use track_common::*;

fn long_table(frames: usize, per_frame: usize) -> String {
    let mut s = String::from("frame,y,x,mass\n");
    for t in 0..frames {
        for k in 0..per_frame {
            if k % 7 == 3 && t % 3 == 1 {
                continue;
            }
            let d = 0.1 * (t % 50) as f64;
            s += &format!(
                "{},{:.3},{:.3},{}\n",
                t + t / 4,
                20.0 * (k / 10) as f64 + d,
                20.0 * (k % 10) as f64 + d,
                (t * 31 + k) % 1000
            );
        }
    }
    s
}

#[test]
fn rows_must_come_in_frame_order_or_with_unsorted() {
    let d = tmpdir("order");
    let csv = b"frame,y,x\n0,1,1\n0,9,9\n2,1.5,1\n\n1,9,9.5\n";
    fails_with(
        &d,
        csv,
        &[],
        &[
            "in.csv:6",
            "frame 1 after frame 2",
            "sorted by frame",
            "--unsorted",
        ],
    );
    assert!(!d.join("out.csv").exists(), "no partial output is left");
    for strategy in ["optimal", "greedy"] {
        let r = track(
            &d,
            csv,
            &["--unsorted", "--memory", "1", "--strategy", strategy],
        );
        assert!(r.ok, "{}", r.stderr);
        assert_eq!(particles(&d.join("out.csv")), [0, 1, 0, 1], "{strategy}");
    }
    // a frame number repeated further down goes backwards too
    fails_with(
        &d,
        b"frame,y,x\n0,1,1\n1,1,1\n0,1,1\n",
        &[],
        &["in.csv:4", "frame 0 after frame 1"],
    );
}

/// Linked as it is read, the output is byte for byte the whole-table output (`--unsorted`,
/// the former implementation), on the fixtures and with every flag that changes what is held.
#[test]
fn streaming_output_equals_the_whole_table_output() {
    let d = tmpdir("same");
    let detect = test_support::fixtures::path("detect").join("movie/movie__locate_d7.csv");
    let mut cases: Vec<(PathBuf, Vec<&str>)> = Vec::new();
    for extra in [
        &["--search-range", "5"][..],
        &["--search-range", "5", "--memory", "2", "--min-length", "5"],
        &[
            "--search-range",
            "5",
            "--strategy",
            "greedy",
            "--memory",
            "1",
        ],
        &[
            "--search-range",
            "5",
            "--strategy",
            "greedy",
            "--memory",
            "2",
            "--min-length",
            "8",
        ],
        &[
            "--search-range",
            "5",
            "--predict",
            "velocity",
            "--min-length",
            "3",
        ],
    ] {
        cases.push((detect.clone(), extra.to_vec()));
    }
    let long = d.join("long.csv");
    std::fs::write(&long, long_table(300, 40)).unwrap();
    for extra in [
        &["--search-range", "3", "--memory", "1", "--min-length", "4"][..],
        &[
            "--search-range",
            "3",
            "--strategy",
            "greedy",
            "--min-length",
            "6",
        ],
    ] {
        cases.push((long.clone(), extra.to_vec()));
    }
    for (name, extra) in [
        (
            "adaptive_brownian_mem2.csv",
            &[
                "--search-range",
                "4",
                "--memory",
                "2",
                "--adaptive-stop",
                "1",
                "--adaptive-step",
                "0.9",
                "--min-length",
                "3",
            ][..],
        ),
        (
            "predict_swirl_span2.csv",
            &[
                "--search-range",
                "6",
                "--memory",
                "1",
                "--predict",
                "velocity",
                "--predict-span",
                "2",
            ],
        ),
        (
            "optimal_dense_brownian.csv",
            &["--search-range", "5", "--min-length", "2"],
        ),
    ] {
        let (inp, _) = track_fixture(&d, name);
        let copy = d.join(name);
        std::fs::rename(&inp, &copy).unwrap();
        cases.push((copy, extra.to_vec()));
    }
    for (input, extra) in &cases {
        let mut outs = Vec::new();
        for mode in [&[][..], &["--unsorted"]] {
            let out = d.join("out.csv");
            let mut args = vec![
                "track",
                input.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ];
            args.extend_from_slice(extra);
            args.extend_from_slice(mode);
            args.push("--json");
            let r = run(&d, &args);
            assert!(r.ok, "{input:?} {extra:?} {mode:?}: {}", r.stderr);
            let s = summary(&d);
            outs.push((
                std::fs::read(&out).unwrap(),
                s["rows_out"].clone(),
                s["tracks"].clone(),
            ));
        }
        assert!(
            outs[0].0 == outs[1].0,
            "{input:?} {extra:?}: outputs differ"
        );
        assert_eq!(outs[0].1, outs[1].1, "{input:?} {extra:?}");
        assert_eq!(outs[0].2, outs[1].2, "{input:?} {extra:?}");
    }
}

/// Peak resident memory (VmHWM, KiB) of a run, polled from /proc while it runs; `None` where
/// /proc has no such field.
fn peak_rss(dir: &Path, args: &[&str]) -> (bool, Option<u64>) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("stdout.txt")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr.txt")).unwrap())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = None;
    let start = Instant::now();
    let ok = loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            if hwm.is_some() {
                peak = hwm.max(peak);
            }
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s.success();
        }
        assert!(start.elapsed() < DEADLINE, "{args:?}: still running");
        std::thread::sleep(Duration::from_millis(2));
    };
    (ok, peak)
}

/// Memory grows with the particles of a frame, not with the frames: ten times more frames
/// hold the same rows at most (`rows_held_max`) and about the same peak resident memory,
/// with and without `--min-length` (which holds rows until their track is long enough).
#[test]
fn a_long_table_is_linked_in_the_memory_of_a_few_frames() {
    let d = tmpdir("long");
    let per_frame = 60;
    let mut peaks = Vec::new();
    for frames in [2_000, 20_000] {
        let inp = d.join(format!("long{frames}.csv"));
        std::fs::write(&inp, long_table(frames, per_frame)).unwrap();
        let out = d.join("out.csv");
        let mut held = Vec::new();
        for extra in [
            &[][..],
            &["--min-length", "5", "--memory", "1"],
            &["--strategy", "greedy", "--min-length", "5"],
        ] {
            let mut args = vec![
                "track",
                inp.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
                "--search-range",
                "3",
                "--json",
            ];
            args.extend_from_slice(extra);
            let (ok, peak) = peak_rss(&d, &args);
            assert!(
                ok,
                "{}",
                std::fs::read_to_string(d.join("stderr.txt")).unwrap()
            );
            let s = summary(&d);
            assert!(s["rows_in"].as_u64().unwrap() > (frames * per_frame * 9 / 10) as u64);
            let h = s["rows_held_max"].as_u64().unwrap();
            held.push(h);
            peaks.push((frames, extra.to_vec(), peak));
        }
        // one frame without --min-length; a few frames' rows with it
        assert_eq!(held[0], per_frame as u64, "{held:?}");
        for h in &held[1..] {
            assert!(*h <= 8 * per_frame as u64, "{held:?}");
        }
        peaks.push((frames, vec!["held"], Some(held.iter().sum())));
    }
    eprintln!("{peaks:?}");
    let n = peaks.len() / 2;
    for (short, long) in peaks[..n].iter().zip(&peaks[n..]) {
        if short.1 == ["held"] {
            assert_eq!(short.2, long.2, "rows held: {peaks:?}");
        } else if let (Some(a), Some(b)) = (short.2, long.2) {
            // the long input is 10× larger (≈ 30 MB): reading it whole would add far more
            assert!(b < a + 8 * 1024, "peak RSS {a} KiB vs {b} KiB: {peaks:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}
