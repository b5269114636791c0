//! Multi-page grayscale TIFF stacks (u8, u16, f32; f64 too) as movies `[T][H][W]`.
//!
//! Every page must be single-channel and have the same size and sample type as the first;
//! anything else is a typed error, never a panic.

use std::io::{BufReader, Read, Seek};
use std::path::Path;

use algorithms::detect::Movie;
use bridge_core::{BridgeError, Result};
use ndarray::Array3;
use tiff::decoder::{Decoder, DecodingResult, Limits};

fn terr(path: &str, e: impl std::fmt::Display) -> BridgeError {
    BridgeError::InvalidInput(format!("{path}: cannot decode TIFF: {e}"))
}

/// Pixels of one decoded page.
#[derive(Debug, Clone, PartialEq)]
pub enum Page {
    /// 8-bit pixels.
    U8(Vec<u8>),
    /// 16-bit pixels.
    U16(Vec<u16>),
    /// 32-bit float pixels.
    F32(Vec<f32>),
    /// 64-bit float pixels.
    F64(Vec<f64>),
}

impl Page {
    fn kind(&self) -> &'static str {
        match self {
            Page::U8(_) => "u8",
            Page::U16(_) => "u16",
            Page::F32(_) => "f32",
            Page::F64(_) => "f64",
        }
    }
}

/// Decode every page of a TIFF stream: `(height, width, pages)`.
pub fn decode_pages<R: Read + Seek>(reader: R, path: &str) -> Result<(usize, usize, Vec<Page>)> {
    let mut limits = Limits::default();
    limits.decoding_buffer_size = 1 << 31;
    let mut dec = Decoder::new(reader)
        .map_err(|e| terr(path, e))?
        .with_limits(limits);
    let mut pages = Vec::new();
    let mut dims: Option<(usize, usize)> = None;
    loop {
        let (w, h) = dec.dimensions().map_err(|e| terr(path, e))?;
        let ct = dec.colortype().map_err(|e| terr(path, e))?;
        if !matches!(ct, tiff::ColorType::Gray(_)) {
            return Err(BridgeError::Unsupported(format!(
                "{path}: page {} has color type {ct:?}; only single-channel grayscale is supported",
                pages.len()
            )));
        }
        let (h, w) = (h as usize, w as usize);
        if let Some(d) = dims
            && d != (h, w)
        {
            return Err(BridgeError::shape_mismatch(
                format!("{}x{}", d.0, d.1),
                format!("{h}x{w}"),
                format!("{path} page {}", pages.len()),
            ));
        }
        dims = Some((h, w));
        let page = match dec.read_image().map_err(|e| terr(path, e))? {
            DecodingResult::U8(v) => Page::U8(v),
            DecodingResult::U16(v) => Page::U16(v),
            DecodingResult::F32(v) => Page::F32(v),
            DecodingResult::F64(v) => Page::F64(v),
            _ => {
                return Err(BridgeError::Unsupported(format!(
                    "{path}: sample type of page {} (supported: u8, u16, f32, f64)",
                    pages.len()
                )));
            }
        };
        let len = match &page {
            Page::U8(v) => v.len(),
            Page::U16(v) => v.len(),
            Page::F32(v) => v.len(),
            Page::F64(v) => v.len(),
        };
        if len != h * w {
            return Err(BridgeError::shape_mismatch(
                h * w,
                len,
                format!("{path} page {} pixels", pages.len()),
            ));
        }
        if let Some(first) = pages.first()
            && Page::kind(first) != page.kind()
        {
            return Err(BridgeError::InvalidInput(format!(
                "{path}: page {} is {} but page 0 is {}",
                pages.len(),
                page.kind(),
                Page::kind(first)
            )));
        }
        pages.push(page);
        if !dec.more_images() {
            break;
        }
        dec.next_image().map_err(|e| terr(path, e))?;
    }
    let (h, w) = dims.unwrap_or((0, 0));
    Ok((h, w, pages))
}

/// Stack same-typed pages into a movie.
pub fn pages_to_movie(h: usize, w: usize, pages: Vec<Page>, path: &str) -> Result<Movie> {
    let t = pages.len();
    if t == 0 {
        return Err(BridgeError::InvalidInput(format!("{path}: no image")));
    }
    macro_rules! stack {
        ($variant:ident) => {{
            let mut all = Vec::with_capacity(t * h * w);
            for p in pages {
                match p {
                    Page::$variant(v) => all.extend(v),
                    other => {
                        return Err(BridgeError::InvalidInput(format!(
                            "{path}: mixed pixel types ({} among {})",
                            other.kind(),
                            stringify!($variant)
                        )));
                    }
                }
            }
            Movie::$variant(
                Array3::from_shape_vec((t, h, w), all)
                    .map_err(|e| BridgeError::InvalidInput(format!("{path}: {e}")))?,
            )
        }};
    }
    Ok(match &pages[0] {
        Page::U8(_) => stack!(U8),
        Page::U16(_) => stack!(U16),
        Page::F32(_) => stack!(F32),
        Page::F64(_) => stack!(F64),
    })
}

/// Read a (multi-page) TIFF file as a movie `[pages][H][W]`.
pub fn read_movie(path: &Path) -> Result<Movie> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let (h, w, pages) = decode_pages(BufReader::new(f), &name)?;
    pages_to_movie(h, w, pages, &name)
}
