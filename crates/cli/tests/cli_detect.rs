//! End-to-end tests of `arraybridge detect` and `arraybridge track` on the detection fixtures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use arraybridge::io::npy::{NpyArray, encode_npy, read_npy};

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

fn fixture(rel: &str) -> PathBuf {
    test_support::fixtures::path("detect").join(rel)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-detect-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    (out.status.success(), stderr)
}

fn read_table(p: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(p).unwrap();
    let mut lines = text.lines();
    let header = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    (
        header,
        lines
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect(),
    )
}

fn col(t: &(Vec<String>, Vec<Vec<String>>), name: &str) -> Vec<f64> {
    let c = t.0.iter().position(|h| h == name).unwrap();
    t.1.iter().map(|r| r[c].parse().unwrap()).collect()
}

const REL: [&str; 6] = [
    "--max-sigma",
    "3",
    "--threshold",
    "none",
    "--threshold-rel",
    "0.2",
];

fn assert_same_blobs(out: &Path, golden: &Path, frames: Option<usize>) {
    let (a, b) = (read_table(out), read_table(golden));
    let key = |t: &(Vec<String>, Vec<Vec<String>>)| -> Vec<(i64, i64, i64, i64)> {
        let f = if t.0.iter().any(|h| h == "frame") {
            col(t, "frame")
        } else {
            vec![0.0; t.1.len()]
        };
        let (y, x, s) = (col(t, "y"), col(t, "x"), col(t, "sigma"));
        (0..t.1.len())
            .map(|i| {
                (
                    f[i] as i64,
                    y[i] as i64,
                    x[i] as i64,
                    (s[i] * 1e6).round() as i64,
                )
            })
            .filter(|r| frames.is_none_or(|n| (r.0 as usize) < n))
            .collect()
    };
    assert_eq!(key(&a), key(&b));
}

#[test]
fn detect_log_tiff_and_npy_match_blob_log() {
    let d = tmpdir("log");
    for input in ["movie/movie_u16.tif", "movie/movie_u16.npy"] {
        let out = d.join("det.csv");
        let inp = fixture(input);
        let mut args = vec![
            "detect",
            inp.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--quiet",
        ];
        args.extend(REL);
        args.extend(["--batch-size", "3"]);
        if input.ends_with("npy") {
            args.push("--fast");
        }
        let (ok, err) = run(&args);
        assert!(ok, "{err}");
        assert_same_blobs(
            &out,
            &fixture("movie/movie__blob_log_default_rel.csv"),
            None,
        );
    }
}

#[test]
fn detect_log_f32_tiff_with_refine() {
    let d = tmpdir("f32");
    let NpyArray::F32(a) = read_npy(&fixture("blob_log/hisnr_f32.npy")).unwrap() else {
        panic!()
    };
    let (h, w) = (a.shape()[0] as u32, a.shape()[1] as u32);
    let tif = d.join("hisnr.tif");
    {
        let f = std::fs::File::create(&tif).unwrap();
        let mut enc = tiff::encoder::TiffEncoder::new(f).unwrap();
        enc.write_image::<tiff::encoder::colortype::Gray32Float>(w, h, a.as_slice().unwrap())
            .unwrap();
    }
    let out = d.join("det.csv");
    let mut args = vec![
        "detect",
        tif.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--refine",
        "-q",
    ];
    args.extend(REL);
    let (ok, err) = run(&args);
    assert!(ok, "{err}");
    assert_same_blobs(&out, &fixture("blob_log/hisnr_f32__default_rel.csv"), None);
    let t = read_table(&out);
    assert!(t.0.iter().any(|h| h == "y_refined"));
    assert_eq!(col(&t, "mass").len(), 100);
}

#[test]
fn detect_png_folder() {
    let d = tmpdir("png");
    let NpyArray::U16(m) = read_npy(&fixture("movie/movie_u16.npy")).unwrap() else {
        panic!()
    };
    let folder = d.join("frames");
    std::fs::create_dir_all(&folder).unwrap();
    for t in 0..3 {
        let f = std::fs::File::create(folder.join(format!("frame_{t:03}.png"))).unwrap();
        let mut enc = png::Encoder::new(std::io::BufWriter::new(f), 256, 256);
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
    let out = d.join("det.csv");
    let mut args = vec![
        "detect",
        folder.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ];
    args.extend(REL);
    let (ok, err) = run(&args);
    assert!(ok, "{err}");
    assert_same_blobs(
        &out,
        &fixture("movie/movie__blob_log_default_rel.csv"),
        Some(3),
    );
}

fn partition(ids: &[f64]) -> BTreeSet<Vec<usize>> {
    let mut m: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, &id) in ids.iter().enumerate() {
        m.entry(id as i64).or_default().push(i);
    }
    m.into_values().collect()
}

/// Whether `arraybridge devices` lists `opencl:0` (PoCL installed); a skip otherwise, a failure
/// with `ARRAYBRIDGE_REQUIRE_OPENCL=1`.
fn has_opencl() -> bool {
    let out = Command::new(BIN).arg("devices").output().unwrap();
    let ok = String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("opencl:0"));
    if !ok {
        assert!(
            std::env::var("ARRAYBRIDGE_REQUIRE_OPENCL").as_deref() != Ok("1"),
            "ARRAYBRIDGE_REQUIRE_OPENCL=1 but no OpenCL device"
        );
        eprintln!("skipping: no OpenCL device");
    }
    ok
}

/// `detect INPUT -o OUT --device DEVICE -q FLAGS…`, which must succeed; its output.
fn detect_on(input: &Path, out: &Path, device: &str, flags: &[&str]) -> std::process::Output {
    let mut args = vec![
        "detect",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--device",
        device,
        "-q",
    ];
    args.extend_from_slice(flags);
    let o = Command::new(BIN).args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?}: {err}");
    o
}

/// `detect --method locate --device opencl:0` on the fixtures of the CPU tests: the same CSV as
/// the CPU, byte for byte, and trackpy's features; the summary names the device.
#[test]
fn locate_on_opencl_matches_cpu_and_trackpy() {
    if !has_opencl() {
        return;
    }
    let d = tmpdir("locate-opencl");
    let runs: [(&str, &[&str], &str); 3] = [
        (
            "movie/movie_u16.tif",
            &["--diameter", "7", "--minmass", "300"],
            "movie/movie__locate_d7.csv",
        ),
        (
            "blob_log/hisnr_u16.npy",
            &["--diameter", "7", "--minmass", "150"],
            "locate/hisnr_u16__locate_d7.csv",
        ),
        (
            "movie/movie_u16.tif",
            &["--diameter", "9", "--minmass", "500"],
            "locate/movie_frame0__locate_d9.csv",
        ),
    ];
    for (k, (input, flags, golden)) in runs.iter().enumerate() {
        let inp = fixture(input);
        let mut outs = Vec::new();
        for device in ["cpu", "opencl:0"] {
            let o = d.join(format!("{k}-{}.csv", device.replace(':', "")));
            let out = detect_on(
                &inp,
                &o,
                device,
                &[&["--method", "locate", "--json"], *flags].concat(),
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(
                v["device"],
                device,
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
            outs.push(o);
        }
        assert_eq!(
            std::fs::read(&outs[0]).unwrap(),
            std::fs::read(&outs[1]).unwrap(),
            "{input} {flags:?}: opencl:0 wrote another CSV than the CPU"
        );
        let (a, g) = (read_table(&outs[1]), read_table(&fixture(golden)));
        let fa = col(&a, "frame");
        let rows: Vec<usize> = if golden.contains("frame0") {
            (0..fa.len()).filter(|&i| fa[i] == 0.0).collect()
        } else {
            (0..fa.len()).collect()
        };
        assert_eq!(rows.len(), g.1.len(), "{golden}: feature count");
        for c in ["y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep"] {
            let got = col(&a, c);
            for (&i, v) in rows.iter().zip(col(&g, c)) {
                let u = got[i];
                assert!(
                    (u - v).abs() <= 1e-6 * v.abs().max(1.0),
                    "{golden} {c}: {u} vs {v}"
                );
            }
        }
    }
}

#[test]
fn locate_then_track_match_trackpy() {
    let d = tmpdir("locate");
    let det = d.join("loc.csv");
    let inp = fixture("movie/movie_u16.tif");
    let (ok, err) = run(&[
        "detect",
        inp.to_str().unwrap(),
        "-o",
        det.to_str().unwrap(),
        "--method",
        "locate",
        "--diameter",
        "7",
        "--minmass",
        "300",
        "-q",
    ]);
    assert!(ok, "{err}");
    let (a, g) = (
        read_table(&det),
        read_table(&fixture("movie/movie__locate_d7.csv")),
    );
    assert_eq!(a.1.len(), 732);
    for c in ["frame", "y", "x", "mass", "ep"] {
        for (u, v) in col(&a, c).iter().zip(col(&g, c)) {
            assert!((u - v).abs() <= 1e-9 * v.abs().max(1.0), "{c}: {u} vs {v}");
        }
    }
    for mem in [0, 2] {
        let tr = d.join(format!("tracks{mem}.csv"));
        let (ok, err) = run(&[
            "track",
            det.to_str().unwrap(),
            "-o",
            tr.to_str().unwrap(),
            "--search-range",
            "5",
            "--memory",
            &mem.to_string(),
        ]);
        assert!(ok, "{err}");
        assert!(err.contains("tracks"), "summary line: {err}");
        let t = read_table(&tr);
        assert_eq!(t.0.last().unwrap(), "particle");
        assert_eq!(t.0.len(), a.0.len() + 1);
        let golden = read_table(&fixture(&format!("movie/movie__link_sr5_mem{mem}.csv")));
        assert_eq!(
            partition(&col(&t, "particle")),
            partition(&col(&golden, "particle"))
        );
    }
}

#[test]
fn bad_inputs_and_parameters_fail_cleanly() {
    let d = tmpdir("errors");
    let out = d.join("o.csv");
    let o = out.to_str().unwrap();
    // corrupt npy (truncated payload)
    let bytes = std::fs::read(fixture("movie/movie_u16.npy")).unwrap();
    let bad = d.join("bad.npy");
    std::fs::write(&bad, &bytes[..bytes.len() - 7]).unwrap();
    // garbage npy
    let garbage = d.join("garbage.npy");
    std::fs::write(&garbage, b"not an npy file at all").unwrap();
    // NaN-only frame
    let nan = d.join("nan.npy");
    let payload: Vec<u8> = std::iter::repeat_n(f32::NAN.to_le_bytes(), 16 * 16)
        .flatten()
        .collect();
    std::fs::write(&nan, encode_npy("<f4", &[16, 16], &payload)).unwrap();
    // empty movie
    let empty = d.join("empty.npy");
    std::fs::write(&empty, encode_npy("<u2", &[0, 16, 16], &[])).unwrap();
    // corrupt tiff
    let badtif = d.join("bad.tif");
    std::fs::write(&badtif, b"II*\0garbage").unwrap();
    let missing = d.join("missing.tif");
    let truth = fixture("movie/movie_truth.csv");
    let movie = fixture("movie/movie_u16.npy");
    let m = movie.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["detect", bad.to_str().unwrap(), "-o", o],
        vec!["detect", garbage.to_str().unwrap(), "-o", o],
        vec![
            "detect",
            nan.to_str().unwrap(),
            "-o",
            o,
            "--threshold",
            "none",
        ],
        vec!["detect", empty.to_str().unwrap(), "-o", o],
        vec!["detect", badtif.to_str().unwrap(), "-o", o],
        vec!["detect", missing.to_str().unwrap(), "-o", o],
        vec!["detect", m, "-o", o, "--min-sigma", "3", "--max-sigma", "1"],
        vec!["detect", m, "-o", o, "--num-sigma", "0"],
        vec!["detect", m, "-o", o, "--device", "quantum:0"],
        vec!["detect", m, "-o", o, "--device", "cuda:0"],
        vec!["detect", m, "-o", o, "--method", "locate"],
        vec![
            "detect",
            m,
            "-o",
            o,
            "--method",
            "locate",
            "--diameter",
            "8",
        ],
        vec!["detect", m, "-o", o, "--batch-size", "0"],
        vec!["track", m, "-o", o, "--search-range", "5"],
        vec![
            "track",
            truth.to_str().unwrap(),
            "-o",
            o,
            "--search-range",
            "-1",
        ],
    ];
    for c in cases {
        let (ok, err) = run(&c);
        assert!(!ok, "{c:?} should fail");
        assert!(err.contains("error"), "{c:?}: {err}");
    }
}

/// A real-like movie: `t` frames of `h × w` on a dim uneven background (a gradient and a few
/// broad humps), 60 Gaussian spots of σ 1–3 with uneven brightness moving a little, and
/// shot-like noise, scaled to `max` (255 for u8, 65535 for u16).
fn real_like(t: usize, h: usize, w: usize, max: f64) -> Vec<f64> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let spots: Vec<[f64; 4]> = (0..60)
        .map(|_| {
            [
                next() * h as f64,
                next() * w as f64,
                1.0 + 2.0 * next(),
                0.2 + 0.8 * next(),
            ]
        })
        .collect();
    let mut out = Vec::with_capacity(t * h * w);
    for k in 0..t {
        for y in 0..h {
            for x in 0..w {
                let (yf, xf) = (y as f64, x as f64);
                let mut v = 0.08 + 0.05 * (xf / w as f64) + 0.04 * ((yf / 23.0).sin() + 1.0);
                for &[sy, sx, sg, a] in &spots {
                    let (dy, dx) = (yf - sy - 0.3 * k as f64, xf - sx + 0.2 * k as f64);
                    v += a * (-(dy * dy + dx * dx) / (2.0 * sg * sg)).exp();
                }
                v += 0.03 * (next() - 0.5) * v.sqrt();
                out.push((v.clamp(0.0, 1.0) * max).round());
            }
        }
    }
    out
}

/// Issue 29: `detect --device opencl:0` (LoG, the default arithmetic) writes the CPU's CSV byte
/// for byte wherever the device has doubles (PoCL has): on the fixtures (u16 and f32) and on a
/// u8 and a u16 real-like movie, with relative and absolute thresholds and `--refine`; with the
/// certified f32 search (the default; also with its passes' multiply-adds fused,
/// `ARRAYBRIDGE_DETECT_PASS_FMA=1`) and with the cube in the working type
/// (`ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED=0`).
#[test]
fn log_on_opencl_writes_the_cpus_csv() {
    if !has_opencl() {
        return;
    }
    let d = tmpdir("log-opencl-bytes");
    let (t, h, w) = (6, 120, 150);
    let px = real_like(t, h, w, 255.0);
    let u8_movie = d.join("real_u8.npy");
    let bytes: Vec<u8> = px.iter().map(|&v| v as u8).collect();
    std::fs::write(&u8_movie, encode_npy("|u1", &[t, h, w], &bytes)).unwrap();
    let u16_movie = d.join("real_u16.npy");
    let bytes: Vec<u8> = px
        .iter()
        .flat_map(|&v| ((v * 257.0) as u16).to_le_bytes())
        .collect();
    std::fs::write(&u16_movie, encode_npy("<u2", &[t, h, w], &bytes)).unwrap();
    let rel: &[&str] = &[
        "--max-sigma",
        "3",
        "--threshold",
        "none",
        "--threshold-rel",
        "0.2",
    ];
    let abs: &[&str] = &[
        "--max-sigma",
        "5",
        "--num-sigma",
        "7",
        "--threshold",
        "0.02",
    ];
    let runs: [(PathBuf, &[&str]); 7] = [
        (fixture("movie/movie_u16.npy"), rel),
        (
            fixture("blob_log/hisnr_u16.npy"),
            &[
                "--max-sigma",
                "5",
                "--num-sigma",
                "7",
                "--threshold",
                "0.00012",
            ],
        ),
        (fixture("blob_log/lowsnr_f32.npy"), rel),
        (u8_movie.clone(), rel),
        (u8_movie, abs),
        (u16_movie.clone(), rel),
        (
            u16_movie,
            &["--max-sigma", "3", "--threshold", "0.02", "--refine"],
        ),
    ];
    for (k, (input, flags)) in runs.iter().enumerate() {
        let mut outs = Vec::new();
        // the certified f32 search (the default; its passes' multiply-adds fused or not) and
        // the cube in the working type
        let runs = [
            ("cpu", "auto", "auto"),
            ("opencl:0", "auto", "auto"),
            ("opencl:0", "0", "auto"),
            ("opencl:0", "auto", "1"),
        ];
        for (device, certified, fma) in runs {
            let name = format!("{k}-{}-{certified}-{fma}.csv", device.replace(':', ""));
            let o = d.join(name);
            let mut args = vec![
                "detect",
                input.to_str().unwrap(),
                "-o",
                o.to_str().unwrap(),
                "--device",
                device,
                "-q",
            ];
            args.extend_from_slice(flags);
            let run = Command::new(BIN)
                .args(&args)
                .env("ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED", certified)
                .env("ARRAYBRIDGE_DETECT_PASS_FMA", fma)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(run.status.success(), "{args:?}: {err}");
            outs.push(std::fs::read(&o).unwrap());
        }
        let rows = outs[0].iter().filter(|&&b| b == b'\n').count();
        assert!(rows > 20, "{input:?} {flags:?}: {rows} rows");
        assert!(
            outs[0] == outs[1],
            "{input:?} {flags:?}: opencl:0 (certified search) differs from the CPU"
        );
        assert!(
            outs[0] == outs[2],
            "{input:?} {flags:?}: opencl:0 (working-type cube) differs from the CPU"
        );
        assert!(
            outs[0] == outs[3],
            "{input:?} {flags:?}: opencl:0 (certified search, fused passes) differs from the CPU"
        );
    }
}

/// One `[trace] +a..b s [thread] text` line of `ARRAYBRIDGE_TRACE=1`: its span, thread and text.
fn trace_spans(stderr: &str) -> Vec<(f64, f64, String, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[trace] +")?;
            let (span, rest) = rest.split_once(" s [")?;
            let (a, b) = span.split_once("..")?;
            let (thread, text) = rest.split_once("] ")?;
            Some((a.parse().ok()?, b.parse().ok()?, thread.into(), text.into()))
        })
        .collect()
}

/// `detect --device opencl:0` with two batches in flight (the OpenCL default): the CPU's CSV
/// byte for byte (as with one batch in flight, `ARRAYBRIDGE_DETECT_IN_FLIGHT=1`), and
/// `ARRAYBRIDGE_TRACE=1` shows the two workers' stages overlapping: a batch's upload while
/// another batch's kernels run on the device, and a batch's host work (noise, refinement,
/// particles) while another's kernels run.
#[test]
fn log_on_opencl_overlaps_batches_with_the_cpus_csv() {
    if !has_opencl() {
        return;
    }
    let d = tmpdir("log-opencl-overlap");
    let (t, h, w) = (20, 160, 192);
    let px = real_like(t, h, w, 255.0);
    let movie = d.join("real_u16.npy");
    let bytes: Vec<u8> = px
        .iter()
        .flat_map(|&v| ((v * 257.0) as u16).to_le_bytes())
        .collect();
    std::fs::write(&movie, encode_npy("<u2", &[t, h, w], &bytes)).unwrap();
    let flags = [
        "--max-sigma",
        "5",
        "--num-sigma",
        "10",
        "--threshold",
        "none",
        "--threshold-rel",
        "0.2",
        "--refine",
        "--batch-size",
        "2",
    ];
    let cpu = d.join("cpu.csv");
    detect_on(&movie, &cpu, "cpu", &flags);
    let args: Vec<String> = ["detect", movie.to_str().unwrap(), "--device", "opencl:0"]
        .iter()
        .map(|s| s.to_string())
        .chain(flags.iter().map(|s| s.to_string()))
        .collect();
    for in_flight in ["1", "auto"] {
        let out = d.join(format!("opencl-{in_flight}.csv"));
        let mut a = args.clone();
        a.extend(["-o".into(), out.to_str().unwrap().into()]);
        let o = Command::new(BIN)
            .args(&a)
            .env("ARRAYBRIDGE_TRACE", "1")
            .env("ARRAYBRIDGE_DETECT_IN_FLIGHT", in_flight)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&cpu).unwrap(),
            "in flight {in_flight}: opencl:0 differs from the CPU"
        );
        let spans = trace_spans(&err);
        let of = |what: &str| -> Vec<&(f64, f64, String, String)> {
            spans.iter().filter(|s| s.3.contains(what)).collect()
        };
        let (uploads, devices, hosts) = (
            of("detect: upload"),
            of("detect: device"),
            of("noise/refine/particles"),
        );
        // (the CLI may run a frame first: the first chunk's sample)
        assert!(devices.len() >= t / 2, "{err}");
        assert!(hosts.len() >= t / 2, "{err}");
        // the device runs one batch at a time, whatever the workers
        let mut dev: Vec<(f64, f64)> = devices.iter().map(|s| (s.0, s.1)).collect();
        dev.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(dev.windows(2).all(|p| p[1].0 >= p[0].1 - 1e-4), "{dev:?}");
        let overlaps = |a: &[&(f64, f64, String, String)]| {
            a.iter()
                .any(|x| devices.iter().any(|d| d.2 != x.2 && x.0 < d.1 && d.0 < x.1))
        };
        if in_flight == "1" {
            assert!(spans.iter().all(|s| s.2 == "main"), "{err}");
        } else {
            // (a chunk of one batch runs on the calling thread)
            let threads: BTreeSet<&str> = devices.iter().map(|s| s.2.as_str()).collect();
            assert!(
                threads.is_superset(&BTreeSet::from(["detect-0", "detect-1"])),
                "{err}"
            );
            assert!(
                overlaps(&uploads),
                "no upload during another batch's kernels: {err}"
            );
            assert!(
                overlaps(&hosts),
                "no host work during another batch's kernels: {err}"
            );
        }
    }
}
