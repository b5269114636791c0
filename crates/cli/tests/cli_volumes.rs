//! `arraybridge detect` on z-stacks: a 4-D `.npy`, an ImageJ hyperstack TIFF and `--axes zyx`
//! give one row per blob of each volume (`frame,z,y,x,sigma…`), equal to the library's n-D
//! `blob_log` of each volume (itself equal to scikit-image's on the fixtures); what volumes
//! cannot do is refused in words, before any output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use algorithms::detect::blob_log::{
    BlobLogNdParams, Border, Prescale, Sigma, VolumeView, blob_log_nd_prescaled,
};
use ndarray::{Array3, Axis};

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ab-cli-volumes-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fixture volume (u16, z, y, x) and a second one: the same, shifted along y and x.
fn volumes() -> Vec<Array3<u16>> {
    let npy = test_support::npy::read(&test_support::fixtures::path(
        "detect/blob_log_nd/vol_u16.npy",
    ));
    let s = &npy.shape;
    let v = Array3::from_shape_vec((s[0], s[1], s[2]), npy.u16s()).unwrap();
    let mut w = v.clone();
    for (mut dst, src) in w.axis_iter_mut(Axis(0)).zip(v.axis_iter(Axis(0))) {
        let (h, wd) = src.dim();
        for y in 0..h {
            for x in 0..wd {
                dst[[y, x]] = src[[(y + 3) % h, (x + 5) % wd]];
            }
        }
    }
    vec![v, w]
}

fn write_npy(path: &Path, vols: &[Array3<u16>]) {
    let (z, h, w) = vols[0].dim();
    let mut payload = Vec::new();
    for v in vols {
        for &p in v.iter() {
            payload.extend_from_slice(&p.to_le_bytes());
        }
    }
    let shape: Vec<usize> = if vols.len() == 1 {
        vec![z, h, w]
    } else {
        vec![vols.len(), z, h, w]
    };
    std::fs::write(
        path,
        arraybridge::io::npy::encode_npy("<u2", &shape, &payload),
    )
    .unwrap();
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN).arg("-q").args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The anisotropic case of the fixtures (`vol_u16__aniso`): σ (2, 1, 1) … (6, 3, 3), 5 scales,
/// threshold 0.005.
const ANISO: [&str; 8] = [
    "--min-sigma",
    "2,1,1",
    "--max-sigma",
    "6,3,3",
    "--num-sigma",
    "5",
    "--threshold",
    "0.005",
];

fn aniso() -> BlobLogNdParams {
    BlobLogNdParams {
        min_sigma: Sigma::PerAxis(vec![2.0, 1.0, 1.0]),
        max_sigma: Sigma::PerAxis(vec![6.0, 3.0, 3.0]),
        num_sigma: 5,
        threshold: Some(0.005),
        threshold_rel: None,
        overlap: 0.5,
        log_scale: false,
        exclude_border: Border::None,
    }
}

/// The library's rows of each volume, with the frame first, as the CLI writes them.
fn library_rows(vols: &[Array3<u16>], p: &BlobLogNdParams) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    for (t, v) in vols.iter().enumerate() {
        let b = blob_log_nd_prescaled(VolumeView::U16(v.view().into_dyn()), Prescale::Legacy, p)
            .unwrap();
        for r in b.rows {
            let mut row = vec![t as f64];
            row.extend(r);
            out.push(row);
        }
    }
    out
}

fn csv_rows(path: &Path) -> (String, Vec<Vec<f64>>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap().to_owned();
    let rows = lines
        .map(|l| l.split(',').map(|v| v.parse::<f64>().unwrap()).collect())
        .collect();
    (header, rows)
}

#[test]
fn a_4d_npy_is_volumes_equal_to_the_library_and_to_scikit_image() {
    let d = tmpdir("npy");
    let vols = volumes();
    let input = d.join("movie.npy");
    write_npy(&input, &vols);
    let out = d.join("blobs.csv");
    let mut args = vec![
        "detect",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--device",
        "cpu",
    ];
    args.extend(ANISO);
    ok(&args);
    let (header, rows) = csv_rows(&out);
    assert_eq!(header, "frame,z,y,x,sigma_z,sigma_y,sigma_x");
    assert_eq!(rows, library_rows(&vols, &aniso()));
    assert!(rows.iter().any(|r| r[0] == 1.0), "both volumes have blobs");
    // frame 0 is scikit-image's blob_log of the fixture volume (as a set of rows)
    let want = test_support::fixtures::path("detect/blob_log_nd/vol_u16__aniso.csv");
    let (_, sk) = csv_rows(&want);
    let mut got: Vec<Vec<f64>> = rows
        .iter()
        .filter(|r| r[0] == 0.0)
        .map(|r| r[1..].to_vec())
        .collect();
    let mut sk = sk;
    let key = |a: &Vec<f64>, b: &Vec<f64>| a.partial_cmp(b).unwrap();
    got.sort_by(key);
    sk.sort_by(key);
    assert_eq!(got, sk);
}

#[test]
fn an_imagej_hyperstack_gives_the_rows_of_the_same_volumes_in_npy() {
    let d = tmpdir("imagej");
    let vols = volumes();
    let (z, h, w) = vols[0].dim();
    let npy = d.join("movie.npy");
    write_npy(&npy, &vols);
    let mut data = Vec::new();
    for v in &vols {
        for &p in v.iter() {
            data.extend_from_slice(&p.to_le_bytes());
        }
    }
    let planes = vols.len() * z;
    let desc = format!("ImageJ=1.54f\nimages={planes}\nslices={z}\nframes=2\nhyperstack=true\n");
    let tif = d.join("movie.tif");
    for ifds in [planes, 1] {
        std::fs::write(
            &tif,
            test_support::tiff::imagej_tiff(
                false, w as u32, h as u32, 16, 1, 1, &desc, &data, ifds,
            ),
        )
        .unwrap();
        let (a, b) = (d.join("a.csv"), d.join("b.csv"));
        for (input, out) in [(&npy, &a), (&tif, &b)] {
            let mut args = vec![
                "detect",
                input.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ];
            args.extend(ANISO);
            ok(&args);
        }
        assert_eq!(
            std::fs::read(&a).unwrap(),
            std::fs::read(&b).unwrap(),
            "{ifds} IFDs"
        );
    }
    // the same file as a movie of 2-D frames is ImageJ's hyperstack refused, in words
    let err = fails(&[
        "detect",
        tif.to_str().unwrap(),
        "-o",
        d.join("c.csv").to_str().unwrap(),
        "--axes",
        "tyx",
    ]);
    assert!(err.contains("slices=") && err.contains("frames=2"), "{err}");
}

#[test]
fn axes_zyx_reads_one_volume_and_isotropic_sigma_has_one_column() {
    let d = tmpdir("zyx");
    let vols = volumes();
    let input = d.join("vol.npy");
    write_npy(&input, &vols[..1]);
    let out = d.join("o.csv");
    let flags = [
        "--min-sigma",
        "1",
        "--max-sigma",
        "5",
        "--num-sigma",
        "9",
        "--threshold",
        "0.005",
    ];
    let mut args = vec![
        "detect",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--axes",
        "zyx",
    ];
    args.extend(flags);
    ok(&args);
    let (header, rows) = csv_rows(&out);
    assert_eq!(header, "frame,z,y,x,sigma");
    let p = BlobLogNdParams {
        min_sigma: Sigma::Scalar(1.0),
        max_sigma: Sigma::Scalar(5.0),
        num_sigma: 9,
        ..aniso()
    };
    assert_eq!(rows, library_rows(&vols[..1], &p));
    assert!(!rows.is_empty());
}

#[test]
fn what_volumes_cannot_do_is_refused_before_any_output() {
    let d = tmpdir("refused");
    let vols = volumes();
    let four = d.join("movie.npy");
    write_npy(&four, &vols);
    let three = d.join("vol.npy");
    write_npy(&three, &vols[..1]);
    let out = d.join("o.csv");
    let o = out.to_str().unwrap();
    let f4 = four.to_str().unwrap();
    let cases: [(Vec<&str>, &str); 4] = [
        (
            vec![
                "detect",
                f4,
                "-o",
                o,
                "--method",
                "locate",
                "--diameter",
                "5",
                "--refine",
            ],
            "--refine: is a setting of the LoG",
        ),
        (
            vec!["detect", f4, "-o", o, "--refine"],
            "refinement is for 2-D",
        ),
        (
            vec!["detect", three.to_str().unwrap(), "-o", o, "--axes", "tzyx"],
            "tzyx needs the number of z planes",
        ),
        (
            vec![
                "detect",
                three.to_str().unwrap(),
                "-o",
                o,
                "--min-sigma",
                "1,2,2",
            ],
            "a σ per axis",
        ),
    ];
    for (args, words) in cases {
        let err = fails(&args);
        assert!(err.contains(words), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?}: no output");
    }
}

#[test]
fn bench_detect_volume_runs_and_writes_the_peers_volumes() {
    let d = tmpdir("bench");
    let out = ok(&[
        "bench",
        "detect",
        "--volume",
        "8",
        "--frames",
        "2",
        "--size",
        "32",
        "--particles",
        "3",
        "--device",
        "cpu",
        "--movie-cache",
        d.to_str().unwrap(),
    ]);
    assert!(out.contains("| 2 | 8×32×32 |"), "{out}");
    let npy = d.join("volumes_t2_z8_n32_p3_s1.npy");
    let h = test_support::npy::read(&npy);
    assert_eq!(h.shape, [2, 8, 32, 32]);
    // volumes run on one device: a list is refused in words
    let err = fails(&["bench", "detect", "--volume", "8", "--device", "all"]);
    assert!(err.contains("one device"), "{err}");
    // and on a named device (its scale space there)
    if test_support::device_or_skip(arraybridge::registry(), bridge_core::Device::OpenCl(0))
        .is_some()
    {
        let out = ok(&[
            "bench",
            "detect",
            "--volume",
            "8",
            "--frames",
            "1",
            "--size",
            "32",
            "--particles",
            "3",
            "--device",
            "opencl:0",
        ]);
        assert!(out.contains("| 1 | 8×32×32 |"), "{out}");
    }
}

#[test]
fn volumes_on_opencl_write_the_cpus_csv() {
    if test_support::device_or_skip(arraybridge::registry(), bridge_core::Device::OpenCl(0))
        .is_none()
    {
        return;
    }
    let d = tmpdir("opencl");
    let input = d.join("movie.npy");
    write_npy(&input, &volumes());
    let run = |device: &str, name: &str| {
        let out = d.join(name);
        let mut args = vec![
            "detect",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--device",
            device,
        ];
        args.extend(ANISO);
        ok(&args);
        std::fs::read(out).unwrap()
    };
    let cpu = run("cpu", "cpu.csv");
    assert!(cpu.len() > 40, "{}", String::from_utf8_lossy(&cpu));
    assert_eq!(run("opencl:0", "cl.csv"), cpu);
    // several devices at once are refused in words, before any output
    let out = d.join("two.csv");
    let err = fails(&[
        "detect",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--device",
        "all",
    ]);
    assert!(!out.exists(), "{err}");
}

/// `--method locate` on volumes: trackpy's 3-D `locate` of each volume (the library's
/// `locate_nd`, itself equal to trackpy's on its fixtures), `frame` then trackpy's columns;
/// sizes per axis give the anisotropic columns; on OpenCL (the bandpass there) the same CSV
/// byte for byte; a size per axis on 2-D frames, or of the wrong length, is refused in words
/// before any output.
#[test]
fn locate_on_volumes_writes_the_librarys_features() {
    use algorithms::detect::locate::{LocateNdParams, locate_nd};
    let d = tmpdir("locate");
    let vols = volumes();
    let input = d.join("movie.npy");
    write_npy(&input, &vols);
    let cases = [
        (vec![5], "frame,z,y,x,mass,size,ecc,signal,raw_mass,ep"),
        (
            vec![9, 5, 5],
            "frame,z,y,x,mass,size_z,size_y,size_x,ecc,signal,raw_mass,ep_z,ep_y,ep_x",
        ),
    ];
    let opencl =
        test_support::device_or_skip(arraybridge::registry(), bridge_core::Device::OpenCl(0))
            .is_some();
    let bits = |rows: &[Vec<f64>]| -> Vec<Vec<u64>> {
        rows.iter()
            .map(|r| r.iter().map(|v| v.to_bits()).collect())
            .collect()
    };
    for (diameter, header) in cases {
        let flag = diameter
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let run = |device: &str| {
            let out = d.join(format!("{flag}-{device}.csv").replace(':', "_"));
            ok(&[
                "detect",
                input.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
                "--method",
                "locate",
                "--diameter",
                &flag,
                "--device",
                device,
            ]);
            out
        };
        let out = run("cpu");
        let (h, rows) = csv_rows(&out);
        assert_eq!(h, header);
        let mut want = Vec::new();
        for (t, v) in vols.iter().enumerate() {
            let p = LocateNdParams::new(diameter.clone());
            let f = locate_nd(VolumeView::U16(v.view().into_dyn()), &p).unwrap();
            want.extend(f.rows.into_iter().map(|r| {
                let mut row = vec![t as f64];
                row.extend(r);
                row
            }));
        }
        assert_eq!(bits(&rows), bits(&want), "--diameter {flag}");
        assert!(
            rows.iter().any(|r| r[0] == 1.0),
            "both volumes have features"
        );
        if opencl {
            let cl = run("opencl:0");
            assert_eq!(
                std::fs::read(cl).unwrap(),
                std::fs::read(&out).unwrap(),
                "--diameter {flag} on opencl:0"
            );
        }
    }
    // a size per axis of the wrong length, or on 2-D frames: refused in words, no output
    let out = d.join("bad.csv");
    let err = fails(&[
        "detect",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--method",
        "locate",
        "--diameter",
        "9,5",
    ]);
    assert!(
        err.contains("diameter") && err.contains("per axis"),
        "{err}"
    );
    assert!(!out.exists());
    let frames = d.join("frames.npy");
    write_npy(&frames, &vols[..1]);
    let err = fails(&[
        "detect",
        frames.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--method",
        "locate",
        "--diameter",
        "9,5,5",
    ]);
    assert!(err.contains("is for volumes"), "{err}");
    assert!(!out.exists());
}
