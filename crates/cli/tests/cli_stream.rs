//! `arraybridge detect` streams its input: `--chunk-frames` changes nothing in the output (npy,
//! multi-page TIFF, a folder of PNG frames; `log` and `locate`), and a movie larger than the
//! memory budget is detected one chunk at a time. A run that fails midway leaves no partial
//! output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use arraybridge::io::npy::{NpyArray, encode_npy, read_npy};

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

fn fixture(rel: &str) -> PathBuf {
    test_support::fixtures::path("detect").join(rel)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-stream-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn detect(input: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "detect",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ])
    .args(["--device", "cpu"])
    .args(extra)
    .env_remove("ARRAYBRIDGE_MEMORY_LIMIT_MB");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && !err.contains("panicked"),
        "{extra:?}: {err}"
    );
}

/// The output with `--chunk-frames 1` and `2`, and with chunks bounded by bytes (`--chunk-mb 1`:
/// a first chunk of one frame, then as many as fit in 1 MiB), equals the one-chunk output, byte
/// for byte.
fn chunking_changes_nothing(input: &Path, dir: &Path, extra: &[&str]) {
    let whole = dir.join("whole.csv");
    detect(
        input,
        &whole,
        &[&["--chunk-frames", "100000"], extra].concat(),
        &[],
    );
    let want = std::fs::read(&whole).unwrap();
    assert!(
        want.iter().filter(|&&b| b == b'\n').count() > 10,
        "detections"
    );
    for chunk in ["1", "2"] {
        let out = dir.join(format!("chunk{chunk}.csv"));
        detect(
            input,
            &out,
            &[&["--chunk-frames", chunk], extra].concat(),
            &[],
        );
        assert_eq!(
            std::fs::read(&out).unwrap(),
            want,
            "--chunk-frames {chunk} {extra:?}"
        );
    }
    let out = dir.join("chunk-mb.csv");
    detect(
        input,
        &out,
        &[&["--chunk-frames", "100000", "--chunk-mb", "1"], extra].concat(),
        &[],
    );
    assert_eq!(std::fs::read(&out).unwrap(), want, "--chunk-mb 1 {extra:?}");
}

const LOG: &[&str] = &[
    "--max-sigma",
    "3",
    "--threshold",
    "none",
    "--threshold-rel",
    "0.2",
];
const LOCATE: &[&str] = &["--method", "locate", "--diameter", "7"];

#[test]
fn npy_and_tiff_stream_with_identical_results() {
    let d = tmpdir("npy-tiff");
    for input in ["movie/movie_u16.npy", "movie/movie_u16.tif"] {
        chunking_changes_nothing(&fixture(input), &d, LOG);
        chunking_changes_nothing(&fixture(input), &d, LOCATE);
    }
}

/// A folder of the fixture's frames as 16-bit PNG files, `frame_000.png`, ...
fn png_folder(d: &Path) -> PathBuf {
    let NpyArray::U16(m) = read_npy(&fixture("movie/movie_u16.npy")).unwrap() else {
        panic!("u16 fixture")
    };
    let folder = d.join("frames");
    std::fs::create_dir_all(&folder).unwrap();
    for t in 0..5 {
        let f = std::fs::File::create(folder.join(format!("frame_{t:03}.png"))).unwrap();
        let (h, w) = (m.shape()[1] as u32, m.shape()[2] as u32);
        let mut enc = png::Encoder::new(std::io::BufWriter::new(f), w, h);
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::Sixteen);
        let mut wr = enc.write_header().unwrap();
        let data: Vec<u8> = m
            .index_axis(ndarray::Axis(0), t)
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        wr.write_image_data(&data).unwrap();
    }
    folder
}

#[test]
fn folders_stream_with_identical_results() {
    let d = tmpdir("folder");
    let folder = png_folder(&d);
    chunking_changes_nothing(&folder, &d, LOG);
}

/// A movie that turns out bad after the first chunks were detected and written (a corrupt
/// last frame in a folder, a TIFF cut short) fails the run and leaves no partial CSV: nothing
/// at the output path (or the file that was there, unchanged) and no temporary file.
#[test]
fn a_run_that_fails_midway_leaves_no_partial_output() {
    let d = tmpdir("partial");
    let folder = png_folder(&d);
    std::fs::write(
        folder.join("frame_005.png"),
        b"\x89PNG\r\n\x1a\nnot a png at all",
    )
    .unwrap();
    let tif = std::fs::read(fixture("movie/movie_u16.tif")).unwrap();
    let cut = d.join("cut.tif");
    std::fs::write(&cut, &tif[..tif.len() * 3 / 4]).unwrap();
    let out_dir = d.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    for (input, what) in [(&folder, "corrupt frame"), (&cut, "truncated TIFF")] {
        for extra in [LOG, LOCATE] {
            let out = out_dir.join("x.csv");
            for before in [None, Some(&b"frame,y,x\n"[..])] {
                let _ = std::fs::remove_file(&out);
                if let Some(b) = before {
                    std::fs::write(&out, b).unwrap();
                }
                let o = Command::new(BIN)
                    .args([
                        "detect",
                        input.to_str().unwrap(),
                        "-o",
                        out.to_str().unwrap(),
                    ])
                    .args(["--device", "cpu", "--chunk-frames", "2", "-q"])
                    .args(extra)
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(!o.status.success(), "{what} {extra:?}: should fail");
                assert!(!err.contains("panicked"), "{err}");
                if input == &folder {
                    assert!(err.contains("frame_005"), "names the bad frame: {err}");
                }
                match before {
                    None => assert!(!out.exists(), "{what} {extra:?}: a partial CSV was left"),
                    Some(b) => assert_eq!(std::fs::read(&out).unwrap(), b, "{what}: replaced"),
                }
                let left: Vec<_> = std::fs::read_dir(&out_dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .filter(|n| n != "x.csv")
                    .collect();
                assert!(left.is_empty(), "{what}: temporary files left: {left:?}");
            }
        }
    }
}

#[test]
fn a_movie_larger_than_the_budget_is_detected_chunk_by_chunk() {
    let d = tmpdir("budget");
    let NpyArray::U16(m) = read_npy(&fixture("movie/movie_u16.npy")).unwrap() else {
        panic!("u16 fixture")
    };
    // The fixture's frames, repeated to ~13 MB, over a 6 MiB budget.
    let (t0, h, w) = (m.shape()[0], m.shape()[1], m.shape()[2]);
    let t = (13 << 20) / (h * w * 2);
    let mut payload = Vec::with_capacity(t * h * w * 2);
    for i in 0..t {
        for v in m.index_axis(ndarray::Axis(0), i % t0) {
            payload.extend_from_slice(&v.to_le_bytes());
        }
    }
    let input = d.join("long.npy");
    std::fs::write(&input, encode_npy("<u2", &[t, h, w], &payload)).unwrap();
    let small: &[&str] = &[
        "--max-sigma",
        "3",
        "--num-sigma",
        "3",
        "--threshold",
        "none",
        "--threshold-rel",
        "0.2",
        "--batch-size",
        "1",
    ];
    let want = d.join("unlimited.csv");
    detect(&input, &want, small, &[]);
    let got = d.join("limited.csv");
    detect(
        &input,
        &got,
        &[small, &["--chunk-frames", "4"]].concat(),
        &[("ARRAYBRIDGE_MEMORY_LIMIT_MB", "6")],
    );
    assert_eq!(std::fs::read(&got).unwrap(), std::fs::read(&want).unwrap());
    // The whole movie at once does not fit that budget: the error says so.
    let o = Command::new(BIN)
        .args(["detect", input.to_str().unwrap(), "-o"])
        .arg(d.join("x.csv"))
        .args(["--device", "cpu", "--chunk-frames", "100000"])
        .args(small)
        .env("ARRAYBRIDGE_MEMORY_LIMIT_MB", "6")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--chunk-frames"),
        "{err}"
    );
}

/// An input error of a frame in a later chunk names the movie's frame, not the chunk's: six
/// f64 frames read two at a time, frame 4 holding ±1e308 (its scale space overflows float64).
#[test]
fn a_bad_frame_in_a_later_chunk_is_named_by_its_movie_number() {
    let d = tmpdir("frame-numbers");
    let (t, h, w) = (6usize, 24usize, 24usize);
    let mut px: Vec<f64> = (0..t * h * w).map(|i| ((i * 7919) % 97) as f64).collect();
    px[4 * h * w + 10 * w + 10] = 1e308;
    px[4 * h * w + 12 * w + 12] = -1e308;
    let bytes: Vec<u8> = px.iter().flat_map(|v| v.to_le_bytes()).collect();
    let input = d.join("bad.npy");
    std::fs::write(&input, encode_npy("<f8", &[t, h, w], &bytes)).unwrap();
    let out = d.join("x.csv");
    let o = Command::new(BIN)
        .args([
            "detect",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .args([
            "--device",
            "cpu",
            "--chunk-frames",
            "2",
            "--batch-size",
            "1",
            "-q",
        ])
        .args(["--prescale", "none", "--threshold", "0.1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "should fail");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("in frames 4..5"), "the movie's frame 4: {err}");
    // and the file it is in (an error of the content named none until 2026-11-28)
    assert!(err.contains(input.to_str().unwrap()), "{err}");
    assert!(!out.exists(), "no partial CSV");
}
