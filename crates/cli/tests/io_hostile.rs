//! Hostile input files (issue #13): headers declaring huge sizes, truncated files, random byte
//! flips. Every reader must return `Ok` or a typed error naming the file — never panic, abort,
//! hang or allocate what a header claims before checking it.
//!
//! The files are built here (FITS cards, PNG chunks with their CRC, TIFF directories by hand);
//! memory limits are simulated with explicit [`Budget`]s in-process and with
//! `ARRAYBRIDGE_MEMORY_LIMIT_MB` through the command-line tool. Nothing here allocates more than
//! a few tens of MiB.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::Command;

use arraybridge::io::{fits, image, npy, tiff};
use bridge_core::BridgeError;
use bridge_core::host::{Budget, LIMIT_ENV, LimitSource};
use test_support::tiff::imagej_tiff;

const BIN: &str = env!("CARGO_BIN_EXE_arraybridge");
const MIB: u64 = 1 << 20;

/// A scratch folder, removed when dropped (some tests write 64 MB sparse files).
struct Tmp(PathBuf);

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

fn tmpdir(name: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("ab-io-hostile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

/// A simulated machine with `mib` MiB free.
fn budget(mib: u64) -> Budget {
    Budget {
        total: None,
        limit: (mib * MIB, LimitSource::Environment),
    }
}

/// The error of a call that must fail, and its text.
fn refused<T: std::fmt::Debug>(r: Result<T, BridgeError>) -> (BridgeError, String) {
    let e = r.expect_err("a hostile file must be refused");
    let s = e.to_string();
    (e, s)
}

/// Run the CLI with `env`; it must fail without panicking. Returns its stderr.
fn cli_fails(args: &[&str], env: &[(&str, &str)]) -> String {
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
struct Rng(u64);

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
fn mutants(valid: &[u8], header: usize, n: usize, seed: u64) -> impl Iterator<Item = Vec<u8>> + '_ {
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
fn survive<T>(
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
// FITS

fn card(s: &str) -> String {
    format!("{s:<80}")
}

/// A primary HDU header (2880-byte blocks of 80-character cards) followed by `data` zero bytes.
fn fits_bytes(bitpix: i64, naxes: &[&str], data: usize) -> Vec<u8> {
    fits_bytes_with(bitpix, naxes, &[], data)
}

/// [`fits_bytes`] with `extra` cards after the axes.
fn fits_bytes_with(bitpix: i64, naxes: &[&str], extra: &[&str], data: usize) -> Vec<u8> {
    let mut h = card("SIMPLE  =                    T");
    h += &card(&format!("BITPIX  = {bitpix:>20}"));
    h += &card(&format!("NAXIS   = {:>20}", naxes.len()));
    for (i, n) in naxes.iter().enumerate() {
        h += &card(&format!("NAXIS{:<3}= {n:>20}", i + 1));
    }
    for e in extra {
        h += &card(e);
    }
    h += &card("END");
    while !h.len().is_multiple_of(2880) {
        h.push(' ');
    }
    let mut b = h.into_bytes();
    b.resize(b.len() + data, 0);
    b
}

#[test]
fn fits_huge_axes_are_refused_before_allocating() {
    let d = tmpdir("fits-huge");
    // (file, BITPIX, axes): 5.7 KB files whose headers declare up to 2^63-1 pixels.
    let cases: &[(&str, i64, &[&str])] = &[
        ("huge.fits", -64, &["100000", "100000"]),
        ("max.fits", -64, &["9223372036854775807"]),
        (
            "max2.fits",
            8,
            &["9223372036854775807", "9223372036854775807"],
        ),
        ("ovf.fits", 16, &["2097152", "2097152", "2097152"]),
        ("big8.fits", 8, &["100000", "100000"]),
        ("one-too-many.fits", -32, &["30", "25"]), // 2880 bytes hold 720 floats, not 750
    ];
    for (name, bitpix, axes) in cases {
        let p = d.join(name);
        std::fs::write(&p, fits_bytes(*bitpix, axes, 2880)).unwrap();
        for r in [fits::read_image(&p), fits::read_image_hdu(&p, Some(0))] {
            let (e, s) = refused(r);
            assert!(matches!(e, BridgeError::InvalidInput(_)), "{s}");
            assert!(s.contains(name), "{s}");
            assert!(s.contains("NAXIS1 = "), "{s}");
            assert!(s.contains("corrupt"), "{s}");
        }
    }
    // The same header with exactly the data it declares is read.
    let p = d.join("fits.fits");
    std::fs::write(&p, fits_bytes(-32, &["30", "24"], 2880)).unwrap();
    assert_eq!(fits::read_image(&p).unwrap().shape(), &[24, 30]);
}

#[test]
fn fits_bad_axes_and_bitpix_are_typed_errors() {
    let d = tmpdir("fits-bad");
    let cases: &[(&str, i64, &[&str], &str)] = &[
        ("neg.fits", -64, &["-5", "3"], "NAXIS"),
        ("bitpix.fits", 7, &["5", "3"], "BITPIX"),
        ("text.fits", 8, &["five", "3"], ""),
        ("float.fits", 8, &["5.5", "3"], ""),
    ];
    for (name, bitpix, axes, word) in cases {
        let p = d.join(name);
        std::fs::write(&p, fits_bytes(*bitpix, axes, 2880)).unwrap();
        let (e, s) = refused(fits::read_image(&p));
        assert!(matches!(e, BridgeError::InvalidInput(_)), "{s}");
        assert!(s.contains(name) && s.contains(word), "{s}");
        assert!(!s.contains("FitsError"), "{s}");
    }
    // A zero axis: no data, which is a clear error, not an empty array.
    let p = d.join("zero.fits");
    std::fs::write(&p, fits_bytes(-64, &["0", "3"], 0)).unwrap();
    let (_, s) = refused(fits::read_image(&p));
    assert!(s.contains("no image HDU with data"), "{s}");
    let (_, s) = refused(fits::read_image_hdu(&p, Some(0)));
    assert!(s.contains("HDU 0 has no data"), "{s}");
    let (_, s) = refused(fits::read_image_hdu(&p, Some(3)));
    assert!(s.contains("no HDU 3"), "{s}");
}

#[test]
fn fits_truncated_files_say_so() {
    let d = tmpdir("fits-trunc");
    let full = d.join("full.fits");
    let a =
        ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[3, 4, 5]), |i| (i[0] + i[1] + i[2]) as f64);
    fits::write_image(&full, &a).unwrap();
    let bytes = std::fs::read(&full).unwrap();
    assert_eq!(bytes.len(), 5760);
    let data_end = 2880 + 3 * 4 * 5 * 8;
    let p = d.join("cut.fits");
    for cut in [0, 5, 9, 80, 2000, 2879, 2880, 2881, 3000, data_end - 1] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let (e, s) = refused(fits::read_image(&p));
        assert!(matches!(e, BridgeError::InvalidInput(_)), "{cut}: {s}");
        assert!(s.contains("cut.fits"), "{s}");
        assert!(!s.contains("FitsError"), "{cut}: {s}");
        if cut >= 2880 {
            assert!(s.contains("truncated"), "{cut}: {s}");
        }
    }
    // Only the padding of the last block missing: the data is all there.
    for cut in [data_end, 5759] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        match catch_unwind(|| fits::read_image(&p)).expect("no panic") {
            Ok(b) => assert_eq!(b, a),
            Err(e) => assert!(e.to_string().contains("cut.fits"), "{e}"),
        }
    }
    // Not a file at all.
    let (e, s) = refused(fits::read_image(d.join("missing.fits")));
    assert!(matches!(e, BridgeError::Io { .. }), "{s}");
    assert!(s.contains("missing.fits"), "{s}");
    let (_, s) = refused(fits::read_image(&d));
    assert!(s.contains("folder"), "{s}");
}

#[test]
fn fits_status_codes_are_words() {
    let t = fits::status_text;
    assert!(t(104).contains("could not open"), "{}", t(104));
    assert!(
        t(107).contains("past the end of the file (truncated?)"),
        "{}",
        t(107)
    );
    assert!(t(108).contains("error reading"), "{}", t(108));
    assert!(t(252).contains("not a FITS file"), "{}", t(252));
    assert!(t(412).contains("overflow"), "{}", t(412));
    for c in [104, 107, 108, 252, 412, 9999] {
        assert!(t(c).contains(&format!("cfitsio status {c}")), "{}", t(c));
    }
}

#[test]
fn fits_larger_than_memory_is_too_large() {
    let d = tmpdir("fits-big");
    // A legitimate 8000 x 8000 BITPIX 8 image (a 64 MB sparse file): 512 MB as float64.
    let p = d.join("big.fits");
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(&fits_bytes(8, &["8000", "8000"], 0)).unwrap();
    f.set_len(2880 + 64_000_000).unwrap();
    drop(f);
    let (e, s) = refused(fits::read_image_hdu_with_budget(&p, None, &budget(256)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(s.contains("big.fits") && s.contains("NAXIS2 = 8000"), "{s}");
    assert!(s.contains(LIMIT_ENV), "{s}");
    // Through the tool, with the limit from the environment.
    let out = d.join("out");
    let err = cli_fails(
        &[
            "paco",
            "--cube",
            p.to_str().unwrap(),
            "--angles",
            p.to_str().unwrap(),
            "--psf",
            p.to_str().unwrap(),
            "--fwhm",
            "4",
            "-o",
            out.to_str().unwrap(),
        ],
        &[(LIMIT_ENV, "256")],
    );
    assert!(err.contains("big.fits") && err.contains(LIMIT_ENV), "{err}");
}

#[test]
fn fits_hostile_headers_through_the_tool() {
    let d = tmpdir("fits-cli");
    let p = d.join("huge.fits");
    std::fs::write(&p, fits_bytes(-64, &["100000", "100000"], 2880)).unwrap();
    let out = d.join("out");
    let err = cli_fails(
        &[
            "paco",
            "--cube",
            p.to_str().unwrap(),
            "--angles",
            p.to_str().unwrap(),
            "--psf",
            p.to_str().unwrap(),
            "--fwhm",
            "4",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        err.contains("huge.fits") && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn fits_extensions_unsigned_and_compressed_images_still_read() {
    use fitsio::FitsFile;
    use fitsio::images::{ImageDescription, ImageType};
    let d = tmpdir("fits-ext");
    // An empty primary HDU and an image extension.
    let p = d.join("ext.fits");
    {
        let mut f = FitsFile::create(&p).open().unwrap();
        let desc = ImageDescription {
            data_type: ImageType::Float,
            dimensions: &[3, 4],
        };
        let hdu = f.create_image("SCI", &desc).unwrap();
        let v: Vec<f32> = (0..12).map(|v| v as f32).collect();
        hdu.write_image(&mut f, &v).unwrap();
    }
    let a = fits::read_image(&p).unwrap();
    assert_eq!((a.shape(), a[[2, 3]]), (&[3usize, 4][..], 11.0));
    assert_eq!(fits::read_image_hdu(&p, Some(1)).unwrap(), a);
    let (_, s) = refused(fits::read_image_hdu(&p, Some(0)));
    assert!(s.contains("HDU 0 has no data"), "{s}");
    let (_, s) = refused(fits::read_image_hdu(&p, Some(2)));
    assert!(s.contains("no HDU 2"), "{s}");
    // A tile-compressed image: its data is smaller than the image, and that is not truncation.
    let p = d.join("comp.fits");
    {
        let mut f = FitsFile::create(format!("{}[compress]", p.display()))
            .open()
            .unwrap();
        let desc = ImageDescription {
            data_type: ImageType::Float,
            dimensions: &[256, 256],
        };
        let hdu = f.create_image("SCI", &desc).unwrap();
        hdu.write_image(&mut f, &vec![1.5f32; 256 * 256]).unwrap();
    }
    assert!(std::fs::metadata(&p).unwrap().len() < 256 * 256 * 4);
    let a = fits::read_image(&p).unwrap();
    assert_eq!(a.shape(), &[256, 256]);
    assert!(a.iter().all(|&v| v == 1.5));
    // Unsigned 64-bit integers (BITPIX 64 with BZERO 2^63), which `fitsio`'s HDU info panics on.
    let p = d.join("u64.fits");
    let mut b = fits_bytes_with(
        64,
        &["2"],
        &[
            "BZERO   =  9223372036854775808",
            "BSCALE  =                    1",
        ],
        2880,
    );
    b[2880..2888].copy_from_slice(&(-(1i64 << 62)).to_be_bytes());
    std::fs::write(&p, &b).unwrap();
    let a = fits::read_image(&p).unwrap();
    assert_eq!(a[[0]], (1u64 << 62) as f64);
    assert_eq!(a[[1]], (1u64 << 63) as f64);
}

#[test]
fn fits_mutants_never_panic() {
    let d = tmpdir("fits-fuzz");
    let src = d.join("src.fits");
    let a = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&[4, 6]), |i| (i[0] * 6 + i[1]) as f64);
    fits::write_image(&src, &a).unwrap();
    let valid = std::fs::read(&src).unwrap();
    let p = d.join("m.fits");
    let all = mutants(&valid, 2880, 500, 0x5eed_f175);
    let (ok, n) = survive(&p, all, |p| {
        fits::read_image_hdu_with_budget(p, None, &budget(64))
    });
    assert!(ok > 0 && ok < n, "{ok} of {n} accepted");
}

// ---------------------------------------------------------------------------------------------
// PNG

fn crc32(bytes: &[u8]) -> u32 {
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

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A PNG with only an IHDR (correct CRC), an `idat` payload and IEND.
fn png_ihdr(w: u32, h: u32, depth: u8, color: u8, idat: &[u8]) -> Vec<u8> {
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
fn png_encode(w: u32, h: u32, sixteen: bool, pixel: impl Fn(u32, u32) -> u16) -> Vec<u8> {
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

#[test]
fn png_huge_ihdr_is_refused_before_allocating() {
    let d = tmpdir("png-huge");
    // 100000 x 100000 in a 69-byte file (8 and 16 bit), and the PNG maximum 2^31-1 square.
    let idat = [0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01, 0, 0, 0, 0];
    for (name, w, depth) in [("huge8.png", 100_000u32, 8u8), ("huge16.png", 100_000, 16)] {
        let p = d.join(name);
        std::fs::write(&p, png_ihdr(w, w, depth, 0, &idat)).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() < 80);
        for r in [
            image::read_movie(&p),
            image::read_movie_with_budget(&p, &budget(1 << 30)),
        ] {
            let (e, s) = refused(r);
            assert!(s.contains(name), "{s}");
            assert!(
                matches!(e, BridgeError::InvalidInput(_)) && s.contains("truncated or corrupt"),
                "{s}"
            );
        }
        assert!(image::read_png_page(&p).is_err());
    }
    // The PNG maximum, 2^31-1 square: the decoder's own limits refuse it.
    let p = d.join("max.png");
    std::fs::write(&p, png_ihdr(0x7fff_ffff, 0x7fff_ffff, 8, 0, &idat)).unwrap();
    let (e, s) = refused(image::read_movie(&p));
    assert!(
        matches!(e, BridgeError::InvalidInput(_)) && s.contains("max.png"),
        "{s}"
    );
    // A colour image of that size: refused for its colour type, before any allocation.
    let p = d.join("rgb.png");
    std::fs::write(&p, png_ihdr(100_000, 100_000, 8, 2, &idat)).unwrap();
    let (e, s) = refused(image::read_movie(&p));
    assert!(matches!(e, BridgeError::Unsupported(_)), "{s}");
    // 1-bit greyscale: its bit depth is named.
    let p = d.join("bits.png");
    std::fs::write(&p, png_ihdr(8, 8, 1, 0, &idat)).unwrap();
    let (_, s) = refused(image::read_movie(&p));
    assert!(
        s.contains("bit depth") && s.contains("supported: 8, 16"),
        "{s}"
    );
}

#[test]
fn png_larger_than_memory_is_too_large() {
    let d = tmpdir("png-big");
    // 2000 x 2000 zeros: a few KB compressed, 4 MB decoded (8 with the raw buffer).
    let p = d.join("zeros.png");
    std::fs::write(&p, png_encode(2000, 2000, false, |_, _| 0)).unwrap();
    let (e, s) = refused(image::read_movie_with_budget(&p, &budget(4)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(s.contains("zeros.png") && s.contains("2000x2000 u8"), "{s}");
    let m = image::read_movie_with_budget(&p, &budget(64)).unwrap();
    assert_eq!(m.dim(), (1, 2000, 2000));
    let err = cli_fails(
        &[
            "detect",
            p.to_str().unwrap(),
            "-o",
            d.join("o.csv").to_str().unwrap(),
        ],
        &[(LIMIT_ENV, "4")],
    );
    assert!(
        err.contains("zeros.png") && err.contains(LIMIT_ENV),
        "{err}"
    );
}

#[test]
fn png_truncations_and_mutants_never_panic() {
    let d = tmpdir("png-fuzz");
    let valid = png_encode(12, 9, true, |x, y| (x * 1000 + y * 7) as u16);
    let p = d.join("m.png");
    std::fs::write(&p, &valid).unwrap();
    let (h, w, page) = image::read_png_page(&p).unwrap();
    assert_eq!((h, w), (9, 12));
    assert!(matches!(page, tiff::Page::U16(ref v) if v[13] == 1007));
    let cuts: Vec<Vec<u8>> = (0..valid.len()).map(|n| valid[..n].to_vec()).collect();
    // Only a cut in the final IEND chunk (12 bytes) may still decode.
    let (ok, _) = survive(&p, cuts, |p| image::read_movie_with_budget(p, &budget(64)));
    assert!(ok <= 12, "{ok}");
    let all = mutants(&valid, 33, 500, 0x0bad_c0de);
    survive(&p, all, |p| image::read_movie_with_budget(p, &budget(64)));
}

// ---------------------------------------------------------------------------------------------
// TIFF

/// A little-endian TIFF of `pages` directories that all point at the same strip: `w x h`
/// greyscale, `bits` per sample, `format` (1 uint, 2 int, 3 float), `compression` (1 none,
/// 8 deflate).
fn tiff_shared_strip(
    pages: usize,
    w: u32,
    h: u32,
    bits: u16,
    format: u16,
    compression: u16,
    strip: &[u8],
) -> Vec<u8> {
    let mut b = b"II\x2a\x00".to_vec();
    let first_ifd = 8 + strip.len() as u32;
    b.extend_from_slice(&first_ifd.to_le_bytes());
    b.extend_from_slice(strip);
    let entries: [(u16, u16, u32); 10] = [
        (256, 4, w),
        (257, 4, h),
        (258, 3, u32::from(bits)),
        (259, 3, u32::from(compression)),
        (262, 3, 1),
        (273, 4, 8),
        (277, 3, 1),
        (278, 4, h),
        (279, 4, strip.len() as u32),
        (339, 3, u32::from(format)),
    ];
    let ifd_len = 2 + 12 * entries.len() as u32 + 4;
    for p in 0..pages {
        let here = b.len() as u32;
        b.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        for (tag, ty, v) in entries {
            b.extend_from_slice(&tag.to_le_bytes());
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
        }
        let next = if p + 1 < pages { here + ifd_len } else { 0 };
        b.extend_from_slice(&next.to_le_bytes());
    }
    b
}

#[test]
fn tiff_pages_sharing_one_strip_count_against_one_total() {
    let d = tmpdir("tiff-shared");
    // 8 pages of 1024 x 1024 u8 sharing one uncompressed 1 MiB strip: 8 MiB decoded.
    let p = d.join("shared.tif");
    std::fs::write(
        &p,
        tiff_shared_strip(8, 1024, 1024, 8, 1, 1, &vec![7u8; 1 << 20]),
    )
    .unwrap();
    let (e, s) = refused(tiff::read_movie_with_budget(&p, &budget(4)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(
        s.contains("shared.tif") && s.contains("4 pages of 1024x1024 u8"),
        "{s}"
    );
    let m = tiff::read_movie_with_budget(&p, &budget(64)).unwrap();
    assert_eq!(m.dim(), (8, 1024, 1024));
    // The same through the tool, limited by the environment. `detect` streams (the first chunk
    // of a byte-bounded stream is one page), so the refusal comes from the budget before the
    // other pages are decoded: the scale space of one 1024x1024 frame does not fit in 4 MiB.
    let err = cli_fails(
        &[
            "detect",
            p.to_str().unwrap(),
            "-o",
            d.join("o.csv").to_str().unwrap(),
        ],
        &[(LIMIT_ENV, "4")],
    );
    assert!(
        err.contains("1024x1024") && err.contains(LIMIT_ENV),
        "{err}"
    );
    assert!(!d.join("o.csv").exists(), "no partial output");
}

#[test]
fn tiff_deflate_bomb_is_refused_by_the_running_total() {
    use ::tiff::encoder::{Compression, TiffEncoder, colortype::Gray8, compression::DeflateLevel};
    let d = tmpdir("tiff-bomb");
    // 8 pages of 2048 x 2048 zeros, deflated: ~100 KB on disk, 32 MiB decoded.
    let p = d.join("bomb.tif");
    {
        let f = std::fs::File::create(&p).unwrap();
        let mut enc = TiffEncoder::new(std::io::BufWriter::new(f))
            .unwrap()
            .with_compression(Compression::Deflate(DeflateLevel::Fast));
        let zeros = vec![0u8; 2048 * 2048];
        for _ in 0..8 {
            enc.write_image::<Gray8>(2048, 2048, &zeros).unwrap();
        }
    }
    assert!(std::fs::metadata(&p).unwrap().len() < 32 * MIB / 100);
    let (e, s) = refused(tiff::read_movie_with_budget(&p, &budget(16)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(
        s.contains("bomb.tif") && s.contains("4 pages of 2048x2048 u8"),
        "{s}"
    );
    // 8 pages of 30000 x 30000 sharing one (garbage) deflate strip: the first page alone
    // (900 MB, twice while it is stacked) is over a 1 GiB budget, before anything is decoded.
    let p = d.join("bomb30k.tif");
    std::fs::write(
        &p,
        tiff_shared_strip(8, 30000, 30000, 8, 1, 8, &[0x78, 0x9c, 1, 2, 3]),
    )
    .unwrap();
    let (e, s) = refused(tiff::read_movie_with_budget(&p, &budget(1024)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(s.contains("1 page of 30000x30000 u8"), "{s}");
}

#[test]
fn tiff_unsupported_pixel_formats_are_named() {
    let d = tmpdir("tiff-formats");
    let cases: &[(&str, u16, u16, &str)] = &[
        ("bits1.tif", 1, 1, "1-bit unsigned integer"),
        ("i16.tif", 16, 2, "16-bit signed integer"),
        ("u32.tif", 32, 1, "32-bit unsigned integer"),
        ("f16.tif", 16, 3, "16-bit floating-point"),
    ];
    for (name, bits, format, words) in cases {
        let p = d.join(name);
        std::fs::write(
            &p,
            tiff_shared_strip(1, 16, 16, *bits, *format, 1, &[0u8; 1024]),
        )
        .unwrap();
        let (e, s) = refused(tiff::read_movie(&p));
        assert!(matches!(e, BridgeError::Unsupported(_)), "{s}");
        assert!(s.contains(name) && s.contains(words), "{s}");
        assert!(
            s.contains("supported: single-channel greyscale of 8- or 16-bit"),
            "{s}"
        );
        assert!(!s.contains("shape mismatch"), "{s}");
    }
    // The supported ones read.
    for (bits, format) in [(8u16, 1u16), (16, 1), (32, 3), (64, 3)] {
        let p = d.join("ok.tif");
        std::fs::write(
            &p,
            tiff_shared_strip(2, 16, 16, bits, format, 1, &[0u8; 2048]),
        )
        .unwrap();
        assert_eq!(tiff::read_movie(&p).unwrap().dim(), (2, 16, 16));
    }
}

#[test]
fn tiff_truncations_and_mutants_never_panic() {
    let d = tmpdir("tiff-fuzz");
    let strip: Vec<u8> = (0..2 * 12 * 10).map(|i| i as u8).collect();
    let valid = tiff_shared_strip(3, 12, 10, 16, 1, 1, &strip);
    let p = d.join("m.tif");
    std::fs::write(&p, &valid).unwrap();
    assert_eq!(tiff::read_movie(&p).unwrap().dim(), (3, 10, 12));
    let cuts: Vec<Vec<u8>> = (0..valid.len())
        .step_by(3)
        .map(|n| valid[..n].to_vec())
        .collect();
    survive(&p, cuts, |p| tiff::read_movie_with_budget(p, &budget(64)));
    let all = mutants(&valid, valid.len(), 500, 0x71ff);
    survive(&p, all, |p| tiff::read_movie_with_budget(p, &budget(64)));
    // The fixture movie too (a real 2.6 MB multi-page TIFF), mutants made one at a time.
    let fixture = test_support::fixtures::path("detect/movie/movie_u16.tif");
    if let Ok(valid) = std::fs::read(fixture) {
        let all = mutants(&valid, valid.len(), 50, 0xf1c5);
        survive(&p, all, |p| tiff::read_movie_with_budget(p, &budget(64)));
    }
}

// ---------------------------------------------------------------------------------------------
// Folders of frames

#[test]
fn folder_frames_must_agree_and_share_the_budget() {
    let d = tmpdir("folder");
    let frames = d.join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    std::fs::write(
        frames.join("a.png"),
        png_encode(32, 32, false, |x, _| x as u16),
    )
    .unwrap();
    std::fs::write(
        frames.join("b.tif"),
        tiff_shared_strip(1, 32, 32, 8, 1, 1, &[1u8; 1024]),
    )
    .unwrap();
    assert_eq!(image::read_movie(&frames).unwrap().dim(), (2, 32, 32));
    // A frame of another size: named, with the first frame's size and name.
    std::fs::write(frames.join("c.png"), png_encode(16, 32, false, |_, _| 0)).unwrap();
    let (e, s) = refused(image::read_movie(&frames));
    assert!(matches!(e, BridgeError::ShapeMismatch { .. }), "{s}");
    assert!(
        s.contains("c.png") && s.contains("a.png") && s.contains("32x32"),
        "{s}"
    );
    // Another pixel type.
    std::fs::write(frames.join("c.png"), png_encode(32, 32, true, |_, _| 0)).unwrap();
    let (_, s) = refused(image::read_movie(&frames));
    assert!(
        s.contains("c.png") && s.contains("u16") && s.contains("a.png"),
        "{s}"
    );
    std::fs::remove_file(frames.join("c.png")).unwrap();
    // A multi-page TIFF among single frames.
    std::fs::write(
        frames.join("d.tif"),
        tiff_shared_strip(2, 32, 32, 8, 1, 1, &[1u8; 1024]),
    )
    .unwrap();
    let (_, s) = refused(image::read_movie(&frames));
    assert!(s.contains("d.tif") && s.contains("single-frame"), "{s}");
    // Many frames, one running total: 12 frames of 512 x 512 u8 (3 MiB) under 2 MiB.
    let many = d.join("many");
    std::fs::create_dir_all(&many).unwrap();
    let frame = png_encode(512, 512, false, |_, _| 3);
    for i in 0..12 {
        std::fs::write(many.join(format!("f{i:02}.png")), &frame).unwrap();
    }
    let (e, s) = refused(image::read_movie_with_budget(&many, &budget(2)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(
        s.contains("many") && s.contains("pages of 512x512 u8"),
        "{s}"
    );
    assert_eq!(
        image::read_movie_with_budget(&many, &budget(16))
            .unwrap()
            .dim(),
        (12, 512, 512)
    );
}

// ---------------------------------------------------------------------------------------------
// .npy

fn npy_header(descr: &str, shape: &str) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out
}

#[test]
fn npy_sizes_are_checked_before_reading() {
    let d = tmpdir("npy");
    let p = d.join("a.npy");
    // prod(shape) overflows.
    std::fs::write(&p, npy_header("<u2", "(1099511627776, 1099511627776, 16)")).unwrap();
    let (e, s) = refused(npy::read_npy(&p));
    assert!(
        matches!(e, BridgeError::InvalidInput(_)) && s.contains("overflows"),
        "{s}"
    );
    assert!(s.contains("a.npy"), "{s}");
    // A header that promises more data than the file holds.
    let mut b = npy_header("<f4", "(100000, 100000)");
    b.extend_from_slice(&[0; 64]);
    std::fs::write(&p, &b).unwrap();
    let (e, s) = refused(npy::read_npy(&p));
    assert!(matches!(e, BridgeError::ShapeMismatch { .. }), "{s}");
    assert!(s.contains("a.npy") && s.contains("truncated"), "{s}");
    // A version-2 header length of 4 GiB.
    let mut b = b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec();
    b.extend_from_slice(b"{'descr': '<u1'}");
    std::fs::write(&p, &b).unwrap();
    let (_, s) = refused(npy::read_npy(&p));
    assert!(s.contains("header length"), "{s}");
    // A non-ASCII dtype (used to panic slicing a multi-byte character).
    let mut b = npy_header("\u{e9}u1", "(2,)");
    b.extend_from_slice(&[1, 2]);
    std::fs::write(&p, &b).unwrap();
    let (_, s) = refused(npy::read_npy(&p));
    assert!(s.contains("dtype"), "{s}");
    // Legitimate big- and little-endian, C and Fortran order still read.
    let mut b = npy_header(">u2", "(2, 3)");
    b.extend_from_slice(&[0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6]);
    std::fs::write(&p, &b).unwrap();
    let npy::NpyArray::U16(a) = npy::read_npy(&p).unwrap() else {
        panic!()
    };
    assert_eq!(a[[1, 2]], 6);
}

#[test]
fn npy_larger_than_memory_is_too_large() {
    let d = tmpdir("npy-big");
    // A legitimate 1 x 8000 x 8000 u8 movie (a 64 MB sparse file).
    let p = d.join("big.npy");
    let header = npy_header("|u1", "(1, 8000, 8000)");
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(&header).unwrap();
    f.set_len(header.len() as u64 + 64_000_000).unwrap();
    drop(f);
    let (e, s) = refused(npy::read_npy_with_budget(&p, &budget(32)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(
        s.contains("big.npy") && s.contains("[1, 8000, 8000]"),
        "{s}"
    );
    let (e, _) = refused(image::read_movie_with_budget(&p, &budget(32)));
    assert!(matches!(e, BridgeError::TooLarge { .. }));
    let err = cli_fails(
        &[
            "detect",
            p.to_str().unwrap(),
            "-o",
            d.join("o.csv").to_str().unwrap(),
        ],
        &[(LIMIT_ENV, "32")],
    );
    assert!(err.contains("big.npy") && err.contains(LIMIT_ENV), "{err}");
    assert!(err.contains("[1, 8000, 8000]"), "{err}");
}

#[test]
fn npy_truncations_and_mutants_never_panic() {
    let d = tmpdir("npy-fuzz");
    let payload: Vec<u8> = (0u16..4 * 5)
        .flat_map(|v| (v * 300).to_le_bytes())
        .collect();
    let valid = npy::encode_npy("<u2", &[4, 5], &payload);
    let p = d.join("m.npy");
    let cuts: Vec<Vec<u8>> = (0..valid.len()).map(|n| valid[..n].to_vec()).collect();
    let (ok, _) = survive(&p, cuts, |p| npy::read_npy_with_budget(p, &budget(64)));
    assert_eq!(ok, 0);
    survive(&p, mutants(&valid, 128, 500, 0x9999), |p| {
        npy::read_movie_with_budget(p, &budget(64))
    });
    for m in mutants(&valid, 128, 500, 0x9999) {
        let r = catch_unwind(|| npy::parse_npy(&m, "m.npy"));
        assert!(r.is_ok(), "parse_npy panicked on {m:?}");
    }
    // The fixture image too.
    let fixture = test_support::fixtures::path("detect/log_filter/image.npy");
    if let Ok(valid) = std::fs::read(fixture) {
        let all = mutants(&valid, 128, 200, 0x1234);
        survive(&p, all, |p| npy::read_npy_with_budget(p, &budget(64)));
    }
}

// ---------------------------------------------------------------------------------------------
// Files read as their writers meant them (issue #32): hidden files in folders of frames, FITS
// BLANK pixels, ImageJ stacks and hyperstacks.

/// The fixture movie (u16), `[T][H][W]`.
fn fixture_movie() -> ndarray::Array3<u16> {
    let npy::NpyArray::U16(m) =
        npy::read_npy(&test_support::fixtures::path("detect/movie/movie_u16.npy")).unwrap()
    else {
        panic!("u16 fixture")
    };
    m.into_dimensionality().unwrap()
}

/// Run `arraybridge detect` on the CPU; it must succeed. Returns the CSV.
fn detect_ok(input: &Path, out: &Path, extra: &[&str]) -> Vec<u8> {
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
fn u16_frames(m: algorithms::detect::Movie) -> ndarray::Array3<u16> {
    match m {
        algorithms::detect::Movie::U16(a) => a,
        other => panic!("expected u16 frames, got {}", other.dtype_name()),
    }
}

#[test]
fn folder_hidden_files_are_not_frames() {
    let d = tmpdir("folder-hidden");
    let m = fixture_movie();
    let (h, w) = (m.shape()[1] as u32, m.shape()[2] as u32);
    let frame = |t: usize| png_encode(w, h, true, |x, y| m[[t, y as usize, x as usize]]);
    let clean = d.join("clean");
    let dirty = d.join("dirty");
    for dir in [&clean, &dirty] {
        std::fs::create_dir_all(dir).unwrap();
        for t in 0..3 {
            std::fs::write(dir.join(format!("frame{t:03}.png")), frame(t)).unwrap();
        }
    }
    // What macOS and editors leave behind: Finder's metadata, AppleDouble resource forks (named
    // like the frames, holding no image), and a hidden image of the right size.
    std::fs::write(
        dirty.join(".DS_Store"),
        b"\0\0\0\x01Bud1 bogus finder metadata",
    )
    .unwrap();
    let apple_double = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        resource fork";
    std::fs::write(dirty.join("._frame000.png"), apple_double).unwrap();
    std::fs::write(dirty.join("._frame001.tif"), apple_double).unwrap();
    std::fs::write(dirty.join(".hidden.png"), frame(3)).unwrap();
    let want = u16_frames(image::read_movie(&clean).unwrap());
    assert_eq!(want.dim(), (3, h as usize, w as usize));
    assert_eq!(u16_frames(image::read_movie(&dirty).unwrap()), want);
    // The streaming reader lists the folder the same way.
    let stream = arraybridge::io::stream::MovieStream::open(&dirty, 2).unwrap();
    assert_eq!(stream.total_frames(), Some(3));
    let chunks: Vec<_> = stream.map(|c| u16_frames(c.unwrap())).collect();
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0], want.slice(ndarray::s![..2, .., ..]));
    assert_eq!(chunks[1], want.slice(ndarray::s![2.., .., ..]));
    // Through the tool: the same detections as the clean folder.
    let a = detect_ok(&clean, &d.join("clean.csv"), &[]);
    let b = detect_ok(&dirty, &d.join("dirty.csv"), &[]);
    assert!(a.iter().filter(|&&c| c == b'\n').count() > 3, "detections");
    assert_eq!(a, b);
    // A folder holding hidden files only: no frame, and the message says why.
    let only = d.join("only-hidden");
    std::fs::create_dir_all(&only).unwrap();
    std::fs::write(only.join("._frame000.png"), apple_double).unwrap();
    std::fs::write(only.join(".hidden.png"), frame(0)).unwrap();
    let (e, s) = refused(image::read_movie(&only));
    assert!(matches!(e, BridgeError::InvalidInput(_)), "{s}");
    assert!(
        s.contains("only-hidden") && s.contains("2 hidden ones") && s.contains("not frames"),
        "{s}"
    );
    let err = cli_fails(
        &[
            "detect",
            only.to_str().unwrap(),
            "-o",
            d.join("o.csv").to_str().unwrap(),
        ],
        &[],
    );
    assert!(err.contains("hidden"), "{err}");
}

/// A primary HDU of BITPIX `bitpix` (8, 16, 32, 64) with axes `naxes` (NAXIS1 first) over the
/// raw `values` (big-endian, as stored), with `extra` cards (BLANK, BSCALE, BZERO).
fn fits_int_image(bitpix: i64, naxes: &[usize], extra: &[&str], values: &[i64]) -> Vec<u8> {
    let size = (bitpix / 8) as usize;
    let n: usize = naxes.iter().product();
    let data = (n * size).div_ceil(2880) * 2880;
    let axes: Vec<String> = naxes.iter().map(ToString::to_string).collect();
    let axes: Vec<&str> = axes.iter().map(String::as_str).collect();
    let mut b = fits_bytes_with(bitpix, &axes, extra, data);
    let start = b.len() - data;
    for (k, &v) in values.iter().enumerate() {
        let at = start + k * size;
        b[at..at + size].copy_from_slice(&v.to_be_bytes()[8 - size..]);
    }
    b
}

#[test]
fn fits_blank_pixels_are_refused() {
    let d = tmpdir("fits-blank");
    let (w, h) = (8usize, 6usize);
    // Every integer BITPIX with its usual BLANK, in pixels 3, 10, ... (12 of them).
    let cases: &[(i64, i64, &str)] = &[
        (8, 255, "BZERO   =                    0"),
        (16, -32768, "BZERO   =                32768"),
        (32, -2147483648, "BSCALE  =                  0.5"),
        (64, i64::MIN, "BZERO   =                    0"),
    ];
    for &(bitpix, blank, scaling) in cases {
        let blank_card = format!("BLANK   = {blank:>20}");
        let extra = [blank_card.as_str(), scaling];
        let base: Vec<i64> = (0..(w * h) as i64).map(|v| v + 1).collect();
        let mut values = base.clone();
        for k in (3..w * h).step_by(4) {
            values[k] = blank;
        }
        let name = format!("blank{bitpix}.fits");
        let p = d.join(&name);
        std::fs::write(&p, fits_int_image(bitpix, &[w, h], &extra, &values)).unwrap();
        for r in [fits::read_image(&p), fits::read_image_hdu(&p, Some(0))] {
            let (e, s) = refused(r);
            assert!(matches!(e, BridgeError::InvalidInput(_)), "{s}");
            assert!(
                s.contains(&name)
                    && s.contains("HDU 0")
                    && s.contains(&format!(
                        "12 pixels are BLANK ({blank}), undefined values; replace them or mask \
                         them first"
                    ))
                    && s.contains("the first at [0, 3]"),
                "{s}"
            );
        }
        // The same header with no pixel equal to BLANK reads normally (scaling applied).
        std::fs::write(&p, fits_int_image(bitpix, &[w, h], &extra, &base)).unwrap();
        let a = fits::read_image(&p).unwrap();
        assert_eq!(a.shape(), &[h, w]);
        let (scale, zero) = match scaling.split_once('=').unwrap() {
            (k, v) if k.trim() == "BSCALE" => (v.trim().parse::<f64>().unwrap(), 0.0),
            (_, v) => (1.0, v.trim().parse::<f64>().unwrap()),
        };
        for (k, &v) in a.iter().enumerate() {
            assert_eq!(v, base[k] as f64 * scale + zero, "{name} pixel {k}");
        }
    }
    // The raw stored value is compared, not the scaled one: with BSCALE 2, a stored -2 reads as
    // -4 (= BLANK as a number) and is data; a stored -4 is BLANK.
    let p = d.join("scaled.fits");
    let extra = [
        "BLANK   =                   -4",
        "BSCALE  =                    2",
    ];
    std::fs::write(&p, fits_int_image(16, &[2], &extra, &[-2, 5])).unwrap();
    let a = fits::read_image(&p).unwrap();
    assert_eq!(a.iter().copied().collect::<Vec<_>>(), vec![-4.0, 10.0]);
    std::fs::write(&p, fits_int_image(16, &[2], &extra, &[-4, 5])).unwrap();
    let (_, s) = refused(fits::read_image(&p));
    assert!(
        s.contains("1 pixel is BLANK (-4), an undefined value"),
        "{s}"
    );
    // A float image ignores BLANK (its undefined pixels are NaN, refused where they matter).
    let p = d.join("float.fits");
    let mut b = fits_bytes_with(-32, &["2"], &["BLANK   =                    0"], 2880);
    let at = b.len() - 2880;
    b[at..at + 4].copy_from_slice(&0f32.to_be_bytes());
    b[at + 4..at + 8].copy_from_slice(&1.5f32.to_be_bytes());
    std::fs::write(&p, &b).unwrap();
    let a = fits::read_image(&p).unwrap();
    assert_eq!(a.iter().copied().collect::<Vec<_>>(), vec![0.0, 1.5]);
    // Through the tool: `paco` refuses the cube (16 x 16, 4 frames) and names it.
    let mut values: Vec<i64> = (0..4 * 16 * 16).collect();
    values[100] = -32768;
    let p = d.join("cube.fits");
    let extra = ["BLANK   =               -32768"];
    std::fs::write(&p, fits_int_image(16, &[16, 16, 4], &extra, &values)).unwrap();
    let (_, s) = refused(fits::read_image(&p));
    assert!(
        s.contains("1 pixel is BLANK (-32768)") && s.contains("the first at [0, 6, 4]"),
        "{s}"
    );
    let out = d.join("out");
    let err = cli_fails(
        &[
            "paco",
            "--cube",
            p.to_str().unwrap(),
            "--angles",
            p.to_str().unwrap(),
            "--psf",
            p.to_str().unwrap(),
            "--fwhm",
            "4",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        err.contains("cube.fits") && err.contains("1 pixel is BLANK (-32768)"),
        "{err}"
    );
}

#[test]
fn imagej_stacks_in_one_ifd_read_every_frame() {
    let d = tmpdir("imagej-stack");
    let m = fixture_movie();
    let (t, h, w) = m.dim();
    let desc = format!("ImageJ=1.54f\nimages={t}\nframes={t}\nloop=false\nmin=0.0\nmax=900.0\n");
    let be: Vec<u8> = m.iter().flat_map(|v| v.to_be_bytes()).collect();
    let le: Vec<u8> = m.iter().flat_map(|v| v.to_le_bytes()).collect();
    let stack = d.join("stack.tif");
    std::fs::write(
        &stack,
        imagej_tiff(true, w as u32, h as u32, 16, 1, 1, &desc, &be, 1),
    )
    .unwrap();
    assert_eq!(u16_frames(image::read_movie(&stack).unwrap()), m);
    assert_eq!(u16_frames(tiff::read_movie(&stack).unwrap()), m);
    // Little-endian, and one IFD per frame (ImageJ below 4 GB): the same frames.
    let p = d.join("stack-le.tif");
    std::fs::write(
        &p,
        imagej_tiff(false, w as u32, h as u32, 16, 1, 1, &desc, &le, 1),
    )
    .unwrap();
    assert_eq!(u16_frames(image::read_movie(&p).unwrap()), m);
    let pages = d.join("pages.tif");
    std::fs::write(
        &pages,
        imagej_tiff(true, w as u32, h as u32, 16, 1, 1, &desc, &be, t),
    )
    .unwrap();
    assert_eq!(u16_frames(image::read_movie(&pages).unwrap()), m);
    // The streaming reader: every frame, in chunks, with the count known up front.
    let stream = arraybridge::io::stream::MovieStream::open(&stack, 3).unwrap();
    assert_eq!(stream.total_frames(), Some(t));
    let mut got: Vec<u16> = Vec::new();
    for c in stream {
        got.extend(u16_frames(c.unwrap()).iter().copied());
    }
    assert_eq!(got, m.iter().copied().collect::<Vec<_>>());
    // f32 frames.
    let f: Vec<f32> = (0..3 * 4 * 5).map(|v| v as f32 * 0.25).collect();
    let p = d.join("f32.tif");
    let bytes: Vec<u8> = f.iter().flat_map(|v| v.to_be_bytes()).collect();
    let desc3 = "ImageJ=1.54f\nimages=3\nslices=3\n";
    std::fs::write(&p, imagej_tiff(true, 5, 4, 32, 3, 1, desc3, &bytes, 1)).unwrap();
    let algorithms::detect::Movie::F32(a) = image::read_movie(&p).unwrap() else {
        panic!("f32")
    };
    assert_eq!(a.iter().copied().collect::<Vec<_>>(), f);
    // Through the tool: the detections of the .npy, with any chunking.
    let want = detect_ok(
        &test_support::fixtures::path("detect/movie/movie_u16.npy"),
        &d.join("npy.csv"),
        &[],
    );
    assert_eq!(detect_ok(&stack, &d.join("stack.csv"), &[]), want);
    assert_eq!(
        detect_ok(&stack, &d.join("chunks.csv"), &["--chunk-frames", "2"]),
        want
    );
    assert_eq!(detect_ok(&pages, &d.join("pages.csv"), &[]), want);
    // In a folder of frames, such a file is several frames: refused.
    let folder = d.join("folder");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::copy(&stack, folder.join("a.tif")).unwrap();
    let (_, s) = refused(image::read_movie(&folder));
    assert!(s.contains("a.tif") && s.contains("single-frame"), "{s}");
}

#[test]
fn imagej_stacks_in_one_ifd_are_checked_before_reading() {
    let d = tmpdir("imagej-hostile");
    let data = vec![7u8; 4 * 64 * 64 * 2];
    let desc = |n: u64| format!("ImageJ=1.54f\nimages={n}\nframes={n}\n");
    // Truncated: 4 frames declared, 3.5 present; and an absurd count.
    let p = d.join("cut.tif");
    for n in [4, 1 << 40, u64::MAX] {
        std::fs::write(
            &p,
            imagej_tiff(true, 64, 64, 16, 1, 1, &desc(n), &data[..7 * 64 * 64], 1),
        )
        .unwrap();
        for r in [
            image::read_movie(&p).map(|_| ()),
            arraybridge::io::stream::MovieStream::open(&p, 2).map(|_| ()),
        ] {
            let (e, s) = refused(r);
            assert!(matches!(e, BridgeError::InvalidInput(_)), "{s}");
            assert!(
                s.contains("cut.tif") && s.contains(&format!("declares {n} images")),
                "{s}"
            );
            assert!(s.contains("truncated"), "{s}");
        }
    }
    let err = cli_fails(
        &[
            "detect",
            p.to_str().unwrap(),
            "-o",
            d.join("o.csv").to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        err.contains("cut.tif") && err.contains("truncated"),
        "{err}"
    );
    // Over the budget: 64 frames of 256 x 256 u16 (8 MiB) under 4 MiB, refused up front.
    let p = d.join("big.tif");
    let big = vec![1u8; 64 * 256 * 256 * 2];
    std::fs::write(
        &p,
        imagej_tiff(false, 256, 256, 16, 1, 1, &desc(64), &big, 1),
    )
    .unwrap();
    let (e, s) = refused(image::read_movie_with_budget(&p, &budget(4)));
    assert!(matches!(e, BridgeError::TooLarge { .. }), "{s}");
    assert!(
        s.contains("big.tif") && s.contains("64 images of 256x256 u16"),
        "{s}"
    );
    assert_eq!(
        image::read_movie_with_budget(&p, &budget(64))
            .unwrap()
            .dim(),
        (64, 256, 256)
    );
    // Compressed: refused, named.
    let p = d.join("deflate.tif");
    std::fs::write(&p, imagej_tiff(true, 64, 64, 16, 1, 8, &desc(4), &data, 1)).unwrap();
    let (e, s) = refused(image::read_movie(&p));
    assert!(matches!(e, BridgeError::Unsupported(_)), "{s}");
    assert!(
        s.contains("deflate.tif") && s.contains("is compressed") && s.contains("uncompressed"),
        "{s}"
    );
    // A description that is not ImageJ's: one frame, as before.
    let p = d.join("other.tif");
    std::fs::write(
        &p,
        imagej_tiff(true, 64, 64, 16, 1, 1, "images=4\nframes=4", &data, 1),
    )
    .unwrap();
    assert_eq!(image::read_movie(&p).unwrap().dim(), (1, 64, 64));
}

#[test]
fn imagej_hyperstacks_are_refused_with_their_axes() {
    let d = tmpdir("imagej-hyper");
    let data = vec![3u8; 6 * 32 * 32];
    let cases = [
        (
            "channels.tif",
            "channels=2\nframes=3\nhyperstack=true\nmode=composite",
            "channels=2, slices=1, frames=3: detection takes one channel; split the channels \
             first",
        ),
        (
            "zt.tif",
            "slices=2\nframes=3\nhyperstack=true",
            "channels=1, slices=2, frames=3: detection takes one image per time point",
        ),
        (
            "cz.tif",
            "channels=3\nslices=2\nhyperstack=true",
            "channels=3, slices=2, frames=1: detection takes one channel",
        ),
    ];
    for (name, axes, words) in cases {
        let desc = format!("ImageJ=1.54f\nimages=6\n{axes}\nloop=false\n");
        for ifds in [1, 6] {
            let p = d.join(name);
            std::fs::write(&p, imagej_tiff(false, 32, 32, 8, 1, 1, &desc, &data, ifds)).unwrap();
            for r in [
                image::read_movie(&p).map(|_| ()),
                arraybridge::io::stream::MovieStream::open(&p, 2).map(|_| ()),
            ] {
                let (e, s) = refused(r);
                assert!(matches!(e, BridgeError::Unsupported(_)), "{s}");
                assert!(
                    s.contains(name) && s.contains(&format!("an ImageJ hyperstack with {words}")),
                    "{ifds} IFDs: {s}"
                );
            }
            // (the command line reads zt.tif as volumes unless told it is a movie of frames)
            let err = cli_fails(
                &[
                    "detect",
                    p.to_str().unwrap(),
                    "-o",
                    d.join("o.csv").to_str().unwrap(),
                    "--axes",
                    "tyx",
                ],
                &[],
            );
            assert!(err.contains(name) && err.contains(words), "{err}");
            assert!(!d.join("o.csv").exists(), "no output");
        }
    }
    // A stack of slices only (ImageJ's default for a plain stack) is a movie of its planes.
    let p = d.join("slices.tif");
    let desc = "ImageJ=1.54f\nimages=6\nslices=6\nloop=false\n";
    std::fs::write(&p, imagej_tiff(false, 32, 32, 8, 1, 1, desc, &data, 1)).unwrap();
    assert_eq!(image::read_movie(&p).unwrap().dim(), (6, 32, 32));
}
