//! Movie input for the detection commands: a multi-page TIFF, a `.npy` (2-D or 3-D), a single
//! PNG, or a folder of single-frame TIFF/PNG files taken in file-name order.

use std::io::BufReader;
use std::path::{Path, PathBuf};

use algorithms::detect::Movie;
use bridge_core::{BridgeError, Result};

use super::tiff::{Page, decode_pages, pages_to_movie};

fn ext_of(p: &Path) -> String {
    p.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Decode a grayscale PNG (8 or 16 bit) into one page.
pub fn read_png_page(path: &Path) -> Result<(usize, usize, Page)> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let bad = |e: png::DecodingError| {
        BridgeError::InvalidInput(format!("{name}: cannot decode PNG: {e}"))
    };
    let mut dec = png::Decoder::new(BufReader::new(f));
    dec.set_transformations(png::Transformations::IDENTITY);
    let mut reader = dec.read_info().map_err(bad)?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| BridgeError::InvalidInput(format!("{name}: PNG too large")))?;
    let mut buf = vec![0u8; size];
    let info = reader.next_frame(&mut buf).map_err(bad)?;
    if info.color_type != png::ColorType::Grayscale {
        return Err(BridgeError::Unsupported(format!(
            "{name}: PNG color type {:?}; only grayscale is supported",
            info.color_type
        )));
    }
    let (h, w) = (info.height as usize, info.width as usize);
    let line = info.line_size;
    let page = match info.bit_depth {
        png::BitDepth::Eight => {
            let mut v = Vec::with_capacity(h * w);
            for r in 0..h {
                v.extend_from_slice(&buf[r * line..r * line + w]);
            }
            Page::U8(v)
        }
        png::BitDepth::Sixteen => {
            let mut v = Vec::with_capacity(h * w);
            for r in 0..h {
                let row = &buf[r * line..r * line + 2 * w];
                v.extend(
                    row.chunks_exact(2)
                        .map(|c| u16::from_be_bytes([c[0], c[1]])),
                );
            }
            Page::U16(v)
        }
        d => {
            return Err(BridgeError::Unsupported(format!(
                "{name}: PNG bit depth {d:?} (supported: 8, 16)"
            )));
        }
    };
    Ok((h, w, page))
}

fn read_folder(dir: &Path) -> Result<Movie> {
    let name = dir.display().to_string();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| BridgeError::io(name.clone(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && matches!(ext_of(p).as_str(), "tif" | "tiff" | "png"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(BridgeError::InvalidInput(format!(
            "{name}: the folder has no .tif/.tiff/.png file"
        )));
    }
    let mut pages = Vec::with_capacity(files.len());
    let mut dims: Option<(usize, usize)> = None;
    for f in &files {
        let fname = f.display().to_string();
        let (h, w, mut ps) = if ext_of(f) == "png" {
            let (h, w, p) = read_png_page(f)?;
            (h, w, vec![p])
        } else {
            let file = std::fs::File::open(f).map_err(|e| BridgeError::io(fname.clone(), e))?;
            decode_pages(BufReader::new(file), &fname)?
        };
        if ps.len() != 1 {
            return Err(BridgeError::InvalidInput(format!(
                "{fname}: expected a single-frame image, found {} pages",
                ps.len()
            )));
        }
        if let Some(d) = dims
            && d != (h, w)
        {
            return Err(BridgeError::shape_mismatch(
                format!("{}x{}", d.0, d.1),
                format!("{h}x{w}"),
                fname,
            ));
        }
        dims = Some((h, w));
        pages.append(&mut ps);
    }
    let (h, w) = dims.unwrap_or((0, 0));
    pages_to_movie(h, w, pages, &name)
}

/// Read any supported movie input (see the module documentation) and check it is not empty.
pub fn read_movie(path: &Path) -> Result<Movie> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let movie = if meta.is_dir() {
        read_folder(path)?
    } else {
        match ext_of(path).as_str() {
            "npy" => super::npy::read_movie(path)?,
            "tif" | "tiff" => super::tiff::read_movie(path)?,
            "png" => {
                let (h, w, p) = read_png_page(path)?;
                pages_to_movie(h, w, vec![p], &name)?
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
        return Err(BridgeError::InvalidInput(format!(
            "{name}: empty movie of shape ({t}, {h}, {w})"
        )));
    }
    Ok(movie)
}
