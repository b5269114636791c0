//! Movie input for the detection commands: a multi-page TIFF, a `.npy` (2-D or 3-D), a single
//! PNG, or a folder of single-frame TIFF/PNG files taken in file-name order (hidden files, whose
//! names start with `.`, such as `.DS_Store` or macOS's `._frame001.tif`, are skipped).
//!
//! # Memory
//!
//! Nothing is allocated at the size a header declares before it has been checked. A PNG's
//! declared size must be one its compressed data can actually expand to (deflate expands at
//! most [`DEFLATE_MAX_RATIO`]:1, so a 69-byte file cannot hold 100000×100000 pixels) and must
//! fit the memory budget ([`bridge_core::host::Budget`]). The frames of a folder, like the pages
//! of a TIFF, share one running total, checked before each frame is decoded
//! ([`super::tiff::Stack`]), and must all have the size and pixel type of the first.

use std::io::BufReader;
use std::path::{Path, PathBuf};

use algorithms::detect::Movie;
use bridge_core::host::{Budget, format_bytes};
use bridge_core::{BridgeError, Result};

use super::tiff::{Page, Stack, decode_into};

/// The most a deflate stream can expand (258-byte matches coded in 2 bits).
pub const DEFLATE_MAX_RATIO: u64 = 1032;

fn ext_of(p: &Path) -> String {
    p.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Decode a grayscale PNG (8 or 16 bit) into one page: `(height, width, page)`.
pub fn read_png_page(path: &Path) -> Result<(usize, usize, Page)> {
    let name = path.display().to_string();
    let mut stack = Stack::new(name.clone(), Budget::current());
    let (h, w) = png_into(path, &mut stack)?;
    let page = match stack.into_movie()? {
        Movie::U8(a) => Page::U8(a.into_raw_vec_and_offset().0),
        Movie::U16(a) => Page::U16(a.into_raw_vec_and_offset().0),
        Movie::F32(a) => Page::F32(a.into_raw_vec_and_offset().0),
        Movie::F64(a) => Page::F64(a.into_raw_vec_and_offset().0),
    };
    Ok((h, w, page))
}

/// Decode a grayscale PNG (8 or 16 bit) onto `stack`: `(height, width)`.
fn png_into(path: &Path, stack: &mut Stack) -> Result<(usize, usize)> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let file_len = f
        .metadata()
        .map_err(|e| BridgeError::io(name.clone(), e))?
        .len();
    let bad = |e: png::DecodingError| {
        let why = match e {
            png::DecodingError::LimitsExceeded => {
                " (a chunk or the declared image is larger than the decoder accepts: corrupt \
                 header?)"
            }
            _ => "",
        };
        BridgeError::InvalidInput(format!("{name}: cannot decode PNG: {e}{why}").into())
    };
    // The decoder's own allocations (metadata chunks, row buffers): its default cap (64 MiB), or
    // less when the budget is smaller.
    let limits = png::Limits {
        bytes: usize::try_from(stack.remaining())
            .unwrap_or(usize::MAX)
            .min(png::Limits::default().bytes),
    };
    let mut dec = png::Decoder::new_with_limits(BufReader::new(f), limits);
    dec.set_transformations(png::Transformations::IDENTITY);
    let mut reader = dec.read_info().map_err(bad)?;
    let info = reader.info();
    let (w, h) = (info.width as usize, info.height as usize);
    if info.color_type != png::ColorType::Grayscale {
        return Err(BridgeError::Unsupported(format!(
            "{name}: PNG color type {:?}; only grayscale is supported (8 or 16 bit)",
            info.color_type
        )));
    }
    let kind = match info.bit_depth {
        png::BitDepth::Eight => "u8",
        png::BitDepth::Sixteen => "u16",
        d => {
            return Err(BridgeError::Unsupported(format!(
                "{name}: PNG bit depth {d:?} (supported: 8, 16)"
            )));
        }
    };
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| BridgeError::InvalidInput(format!("{name}: PNG too large").into()))?;
    let most = file_len.saturating_mul(DEFLATE_MAX_RATIO);
    if size as u64 > most {
        return Err(BridgeError::InvalidInput(
            format!(
                "{name}: the PNG header declares {w}x{h} pixels ({} decoded), but {file_len} bytes \
             of compressed data cannot expand to more than {}: the file is truncated or corrupt",
                format_bytes(size as u64),
                format_bytes(most)
            )
            .into(),
        ));
    }
    // The decoded page (the raw buffer, then the pixels taken out of it) and the running total.
    stack.admit(&name, h, w, kind)?;
    let mut buf: Vec<u8> = Vec::new();
    buf.try_reserve_exact(size).map_err(|_| {
        BridgeError::InvalidInput(
            format!(
                "{name}: could not allocate {} for the image",
                format_bytes(size as u64)
            )
            .into(),
        )
    })?;
    buf.resize(size, 0);
    let info = reader.next_frame(&mut buf).map_err(bad)?;
    if (info.height as usize, info.width as usize) != (h, w) {
        return Err(BridgeError::InvalidInput(
            format!(
                "{name}: the first frame is {}x{}, the header says {h}x{w}",
                info.height, info.width
            )
            .into(),
        ));
    }
    let line = info.line_size;
    let page = match kind {
        "u8" if line == w => {
            buf.truncate(h * w);
            Page::U8(buf)
        }
        "u8" => {
            let mut v = Vec::with_capacity(h * w);
            for r in 0..h {
                v.extend_from_slice(&buf[r * line..r * line + w]);
            }
            Page::U8(v)
        }
        _ => {
            let mut v = Vec::with_capacity(h * w);
            for r in 0..h {
                let row = &buf[r * line..r * line + 2 * w];
                v.extend(
                    row.chunks_exact(2)
                        .map(|c| u16::from_be_bytes([c[0], c[1]])),
                );
            }
            drop(buf);
            Page::U16(v)
        }
    };
    stack.push(&name, page)?;
    Ok((h, w))
}

/// Whether a folder entry is hidden: its name starts with `.` (`.DS_Store`, the `._frame001.tif`
/// resource forks macOS leaves on non-Apple disks, editors' `.frame.png.swp`, `.hidden.png`).
/// Such files are never frames of the movie.
fn is_hidden(p: &Path) -> bool {
    p.file_name()
        .is_some_and(|n| n.as_encoded_bytes().first() == Some(&b'.'))
}

/// The frame files of a folder (`.tif`, `.tiff`, `.png`), in name order; an error when there
/// is none. Hidden files (names starting with `.`, such as macOS's `.DS_Store` and `._*`
/// resource forks) are skipped: they are not frames, and a `._frame001.tif` would otherwise be
/// read as a (corrupt) frame. An entry named like a frame that is not a file (a dangling link,
/// a folder) is an error, as is an entry that cannot be listed: skipping it would number the
/// frames after it wrongly.
pub(crate) fn folder_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let name = dir.display().to_string();
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| BridgeError::io(name.clone(), e))? {
        entries.push(e.map_err(|e| BridgeError::io(name.clone(), e))?.path());
    }
    let framed: Vec<PathBuf> = entries
        .into_iter()
        .filter(|p| matches!(ext_of(p).as_str(), "tif" | "tiff" | "png"))
        .collect();
    if let Some(odd) = framed.iter().find(|p| !is_hidden(p) && !p.is_file()) {
        let what = if odd.is_dir() {
            "a folder"
        } else {
            "not a readable file (a dangling link?)"
        };
        return Err(BridgeError::InvalidInput(
            format!(
                "{}: named like a frame of the folder {name} but {what}: remove it or move it \
                 out, or the frames after it would be numbered wrongly",
                odd.display()
            )
            .into(),
        ));
    }
    let (hidden, mut files): (Vec<PathBuf>, Vec<PathBuf>) =
        framed.into_iter().partition(|p| is_hidden(p));
    files.sort();
    if files.is_empty() {
        let skipped = if hidden.is_empty() {
            String::new()
        } else {
            format!(
                " (only {} hidden one{}, whose names start with '.': those are not frames)",
                hidden.len(),
                if hidden.len() == 1 { "" } else { "s" }
            )
        };
        return Err(BridgeError::InvalidInput(
            format!("{name}: the folder has no .tif/.tiff/.png file{skipped}").into(),
        ));
    }
    Ok(files)
}

/// Decode one single-frame file of a folder (PNG or single-page TIFF) onto `stack`.
pub(crate) fn frame_into(f: &Path, stack: &mut Stack) -> Result<()> {
    let fname = f.display().to_string();
    if ext_of(f) == "png" {
        png_into(f, stack)?;
    } else {
        let file = std::fs::File::open(f).map_err(|e| BridgeError::io(fname.clone(), e))?;
        decode_into(BufReader::new(file), &fname, stack, true)?;
    }
    Ok(())
}

fn read_folder(dir: &Path, budget: &Budget) -> Result<Movie> {
    let name = dir.display().to_string();
    let files = folder_files(dir)?;
    let mut stack = Stack::new(format!("{name} ({} files)", files.len()), *budget);
    for f in &files {
        frame_into(f, &mut stack)?;
    }
    stack.into_movie()
}

/// The extension of `p`, lower-case (`""` without one).
pub(crate) fn extension(p: &Path) -> String {
    ext_of(p)
}

/// Read any supported movie input (see the module documentation) and check it is not empty.
///
/// A folder is read as one frame per `.tif`/`.tiff`/`.png` file in name order; hidden files
/// (names starting with `.`: `.DS_Store`, macOS's `._frame001.tif`) are skipped.
pub fn read_movie(path: &Path) -> Result<Movie> {
    read_movie_with_budget(path, &Budget::current())
}

/// [`read_movie`] under an explicit memory budget (tests simulate a small machine with it).
pub fn read_movie_with_budget(path: &Path, budget: &Budget) -> Result<Movie> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let movie = if meta.is_dir() {
        read_folder(path, budget)?
    } else {
        match ext_of(path).as_str() {
            "npy" => super::npy::read_movie_with_budget(path, budget)?,
            "tif" | "tiff" => super::tiff::read_movie_with_budget(path, budget)?,
            "png" => {
                let mut stack = Stack::new(name.clone(), *budget);
                png_into(path, &mut stack)?;
                stack.into_movie()?
            }
            other => {
                return Err(BridgeError::Unsupported(format!(
                    "{name}: unknown input type {other:?} (expected .tif, .tiff, .npy, .png or a folder)"
                )));
            }
        }
    };
    let (t, h, w) = movie.dim();
    if t == 0 || h == 0 || w == 0 {
        return Err(BridgeError::InvalidInput(
            format!("{name}: empty movie of shape ({t}, {h}, {w})").into(),
        ));
    }
    Ok(movie)
}
