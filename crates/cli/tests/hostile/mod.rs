//! What the hostile-input tests share (`io_hostile.rs`: FITS and `.npy`;
//! `io_hostile_images.rs`: PNG, TIFF, ImageJ stacks, folders of frames): temporary folders,
//! simulated memory budgets, the command-line tool, seeded mutants of valid files, and
//! builders of valid PNG files and of the detection fixture.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::Command;

use arraybridge::io::npy;
use bridge_core::BridgeError;
use bridge_core::host::{Budget, LIMIT_ENV, LimitSource};

pub const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");
pub const MIB: u64 = 1 << 20;

/// A scratch folder, removed when dropped (some tests write 64 MB sparse files).
pub struct Tmp(PathBuf);

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Tmp {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn tmpdir(name: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("ab-io-hostile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

/// A simulated machine with `mib` MiB free.
pub fn budget(mib: u64) -> Budget {
    Budget {
        total: None,
        limit: (mib * MIB, LimitSource::Environment),
    }
}

/// The error of a call that must fail, and its text.
pub fn refused<T: std::fmt::Debug>(r: Result<T, BridgeError>) -> (BridgeError, String) {
    let e = r.expect_err("a hostile file must be refused");
    let s = e.to_string();
    (e, s)
}

/// Run the CLI with `env`; it must fail without panicking. Returns its stderr.
pub fn cli_fails(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(!out.status.success(), "must fail: {stderr}");
    stderr
}

/// A tiny deterministic generator (xorshift64*), so mutants are reproducible.
pub struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Mutants of `valid`: 1–4 random bytes replaced, a run of header digits changed, or a
/// truncation. `header` is how many leading bytes are header (mutated more often).
pub fn mutants(
    valid: &[u8],
    header: usize,
    n: usize,
    seed: u64,
) -> impl Iterator<Item = Vec<u8>> + '_ {
    let mut rng = Rng(seed);
    (0..n).map(move |_| {
        let mut m = valid.to_vec();
        match rng.below(10) {
            0 => m.truncate(rng.below(valid.len())),
            1 | 2 => {
                // A digit of the header becomes a 9 (or a run of 9s: huge sizes).
                let digits: Vec<usize> = (0..header.min(m.len()))
                    .filter(|&i| m[i].is_ascii_digit())
                    .collect();
                if !digits.is_empty() {
                    let i = digits[rng.below(digits.len())];
                    for k in 0..=rng.below(12) {
                        if i >= k && m[i - k].is_ascii_digit() {
                            m[i - k] = b'9';
                        }
                    }
                }
            }
            _ => {
                for _ in 0..=rng.below(4) {
                    let i = if rng.below(3) > 0 {
                        rng.below(header.min(m.len()))
                    } else {
                        rng.below(m.len())
                    };
                    m[i] = rng.next() as u8;
                }
            }
        }
        m
    })
}

/// Write every mutant to `path` and call `read`: each call returns (never panics); errors name
/// the file. Returns how many were accepted, of how many.
pub fn survive<T>(
    path: &Path,
    all: impl IntoIterator<Item = Vec<u8>>,
    read: impl Fn(&Path) -> Result<T, BridgeError>,
) -> (usize, usize) {
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    let (mut ok, mut n) = (0, 0);
    for (k, m) in all.into_iter().enumerate() {
        n += 1;
        std::fs::write(path, &m).unwrap();
        match catch_unwind(AssertUnwindSafe(|| read(path))) {
            Err(_) => panic!("mutant {k} of {name} panicked: {m:?}"),
            Ok(Ok(_)) => ok += 1,
            Ok(Err(e)) => {
                let s = e.to_string();
                assert!(
                    s.contains(&name),
                    "mutant {k}: the error must name the file: {s}"
                );
                assert!(
                    !s.contains("FitsError"),
                    "mutant {k}: raw cfitsio status: {s}"
                );
            }
        }
    }
    (ok, n)
}

// ---------------------------------------------------------------------------------------------
// PNG

pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

pub fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A PNG with only an IHDR (correct CRC), an `idat` payload and IEND.
pub fn png_ihdr(w: u32, h: u32, depth: u8, color: u8, idat: &[u8]) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, 0]);
    png_chunk(&mut b, b"IHDR", &ihdr);
    png_chunk(&mut b, b"IDAT", idat);
    png_chunk(&mut b, b"IEND", &[]);
    b
}

/// A real greyscale PNG, 8 or 16 bit.
pub fn png_encode(w: u32, h: u32, sixteen: bool, pixel: impl Fn(u32, u32) -> u16) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Grayscale);
    enc.set_depth(if sixteen {
        png::BitDepth::Sixteen
    } else {
        png::BitDepth::Eight
    });
    let mut wr = enc.write_header().unwrap();
    let mut data = Vec::new();
    for y in 0..h {
        for x in 0..w {
            let v = pixel(x, y);
            if sixteen {
                data.extend_from_slice(&v.to_be_bytes());
            } else {
                data.push(v as u8);
            }
        }
    }
    wr.write_image_data(&data).unwrap();
    wr.finish().unwrap();
    out
}

// ---------------------------------------------------------------------------------------------
// Files read as their writers meant them (issue #32): hidden files in folders of frames, FITS
// BLANK pixels, ImageJ stacks and hyperstacks.

/// The fixture movie (u16), `[T][H][W]`.
pub fn fixture_movie() -> ndarray::Array3<u16> {
    let npy::NpyArray::U16(m) =
        npy::read_npy(&test_support::fixtures::path("detect/movie/movie_u16.npy")).unwrap()
    else {
        panic!("u16 fixture")
    };
    m.into_dimensionality().unwrap()
}

/// Run `arraybridge detect` on the CPU; it must succeed. Returns the CSV.
pub fn detect_ok(input: &Path, out: &Path, extra: &[&str]) -> Vec<u8> {
    let o = Command::new(BIN)
        .args([
            "detect",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-q",
            "--device",
            "cpu",
            "--max-sigma",
            "3",
            "--threshold",
            "none",
            "--threshold-rel",
            "0.2",
        ])
        .args(extra)
        .env_remove(LIMIT_ENV)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("panicked"), "{err}");
    std::fs::read(out).unwrap()
}

/// The frames of a movie as u16 values, whatever the reader's type (`U16` expected).
pub fn u16_frames(m: algorithms::detect::Movie) -> ndarray::Array3<u16> {
    match m {
        algorithms::detect::Movie::U16(a) => a,
        other => panic!("expected u16 frames, got {}", other.dtype_name()),
    }
}
