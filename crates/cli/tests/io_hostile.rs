//! Hostile input files (issue #13): headers declaring huge sizes, truncated files, random byte
//! flips. Every reader must return `Ok` or a typed error naming the file — never panic, abort,
//! hang or allocate what a header claims before checking it.
//!
//! The files are built here (FITS cards, PNG chunks with their CRC, TIFF directories by hand);
//! memory limits are simulated with explicit [`Budget`]s in-process and with
//! `ARRAYBRIDGE_MEMORY_LIMIT_MB` through the command-line tool. Nothing here allocates more than
//! a few tens of MiB.
//!
//! This file: FITS and `.npy`; `io_hostile_images.rs`: PNG, TIFF, ImageJ stacks and folders of
//! frames; `hostile/mod.rs`: what both share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hostile;

use std::io::Write;
use std::panic::catch_unwind;

use arraybridge::io::{fits, image, npy};
use bridge_core::BridgeError;
use bridge_core::host::LIMIT_ENV;
use hostile::*;

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
