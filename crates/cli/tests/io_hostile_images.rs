//! Hostile image files (issue #13): PNG, TIFF (pages sharing a strip, deflate bombs, pixel
//! formats, ImageJ stacks and hyperstacks) and folders of frames. Every reader must return `Ok`
//! or a typed error naming the file — never panic, abort, hang or allocate what a header claims
//! before checking it. (FITS and `.npy`: `io_hostile.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hostile;

use arraybridge::io::{image, tiff};
use bridge_core::BridgeError;
use bridge_core::host::LIMIT_ENV;
use hostile::*;
use test_support::tiff::imagej_tiff;

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
    // Streamed a frame a chunk: the error still names the movie's first frame (it named the
    // chunk's first, b.tif, until 2026-11-28)
    let mut stream = arraybridge::io::stream::MovieStream::open(&frames, 1).unwrap();
    let e = loop {
        match stream.next_chunk() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the 16x32 frame was streamed"),
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        e.contains("c.png") && e.contains("a.png") && !e.contains("b.tif"),
        "{e}"
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
