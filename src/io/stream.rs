//! Movies larger than memory: [`MovieStream`] reads a movie a chunk of frames at a time, so
//! peak memory is bounded by the chunk, not the movie length.
//!
//! * `.npy` (C order): frames are read straight from the file, `chunk` at a time
//!   ([`super::npy::NpyFrames`]);
//! * multi-page TIFF: pages are decoded `chunk` at a time ([`super::tiff::TiffPages`]);
//! * a folder of single-frame TIFF/PNG files: `chunk` files at a time, in name order (hidden
//!   files, whose names start with `.`, are skipped);
//! * anything else (a single PNG, a Fortran-ordered `.npy`) is read whole and handed out in
//!   chunks.
//!
//! Every chunk is decoded under the host memory budget and must have the frame size and pixel
//! type of the first. [`MovieStream`] is an iterator of `Result<Movie>`, so it plugs into
//! `algorithms::detect::LogDetector::detect_stream` and a reader thread can run it ahead of the
//! device (`arraybridge detect` does).

use std::path::{Path, PathBuf};

use algorithms::detect::Movie;
use bridge_core::host::Budget;
use bridge_core::{BridgeError, Result};

use super::image::{extension, folder_files, frame_into};
use super::npy::NpyFrames;
use super::tiff::{Stack, TiffPages};

enum Source {
    Npy(NpyFrames),
    Tiff(Box<TiffPages>),
    Folder { files: Vec<PathBuf>, next: usize },
    Whole(Option<Movie>),
}

/// A movie read `chunk` frames at a time (see the [module docs](self)).
pub struct MovieStream {
    source: Source,
    name: String,
    chunk: usize,
    total: Option<usize>,
    max_bytes: Option<usize>,
    first: Option<(usize, usize, &'static str)>,
    frame_bytes: Option<usize>,
    done: bool,
}

impl MovieStream {
    /// Open `path` (a `.npy`, `.tif`/`.tiff`, `.png` or a folder of frames) to read `chunk`
    /// frames at a time (at least 1). Nothing but headers is read here. A folder's frames are
    /// its `.tif`/`.tiff`/`.png` files in name order, hidden files (names starting with `.`,
    /// such as `.DS_Store` or macOS's `._frame001.tif`) skipped.
    pub fn open(path: &Path, chunk: usize) -> Result<Self> {
        Self::open_with(path, chunk, false)
    }

    /// [`Self::open`] for a file read as planes that group into volumes (`chunk` planes a
    /// volume): a 4-D `.npy` `(T, Z, Y, X)` is its `T · Z` planes, and an ImageJ hyperstack of
    /// slices at several time points is accepted (see [`super::tiff::TiffPages::open_planes`]).
    pub fn open_planes(path: &Path, chunk: usize) -> Result<Self> {
        Self::open_with(path, chunk, true)
    }

    fn open_with(path: &Path, chunk: usize, planes: bool) -> Result<Self> {
        let name = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|e| BridgeError::io(name.clone(), e))?;
        let (source, total) = if meta.is_dir() {
            let files = folder_files(path)?;
            let n = files.len();
            (Source::Folder { files, next: 0 }, Some(n))
        } else {
            match extension(path).as_str() {
                "npy" => match if planes {
                    NpyFrames::open_planes(path)
                } else {
                    NpyFrames::open(path)
                } {
                    Ok(f) => {
                        let n = f.frames();
                        (Source::Npy(f), Some(n))
                    }
                    Err(BridgeError::Unsupported(_)) => {
                        let m = super::npy::read_movie(path)?;
                        let n = m.len();
                        (Source::Whole(Some(m)), Some(n))
                    }
                    Err(e) => return Err(e),
                },
                "tif" | "tiff" => {
                    let t = if planes {
                        TiffPages::open_planes(path)?
                    } else {
                        TiffPages::open(path)?
                    };
                    let n = t.declared_frames();
                    (Source::Tiff(Box::new(t)), n)
                }
                "png" => {
                    let m = super::image::read_movie(path)?;
                    (Source::Whole(Some(m)), Some(1))
                }
                other => {
                    return Err(BridgeError::Unsupported(format!(
                        "{name}: unknown input type {other:?} (expected .tif, .tiff, .npy, .png \
                         or a folder)"
                    )));
                }
            }
        };
        Ok(MovieStream {
            source,
            name,
            chunk: chunk.max(1),
            max_bytes: None,
            total,
            first: None,
            frame_bytes: None,
            done: false,
        })
    }

    /// Bound every chunk to `bytes` of pixels as well as to `chunk` frames, at least one frame a
    /// chunk, so that memory follows the frame size: 256 frames of 512² u16 are 128 MiB, 256
    /// frames of 2048² u16 are 2 GiB. The frame size is known once a frame is decoded, so with a
    /// byte bound the first chunk is one frame. Results do not depend on the chunking.
    #[must_use]
    pub fn with_max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = Some(bytes);
        self
    }

    /// Frames the next chunk reads: `chunk`, or fewer under the byte bound.
    fn next_len(&self) -> usize {
        match (self.max_bytes, self.frame_bytes) {
            (None, _) => self.chunk,
            (Some(_), None) => 1,
            (Some(max), Some(frame)) => (max / frame.max(1)).clamp(1, self.chunk),
        }
    }

    /// Frames in the movie when the header says (`.npy`, folders, single images, an ImageJ
    /// stack stored in one IFD); `None` for other TIFFs, whose pages are counted as they are
    /// read.
    pub fn total_frames(&self) -> Option<usize> {
        self.total
    }

    /// The next chunk of (at most) `chunk` frames; `None` at the end.
    pub fn next_chunk(&mut self) -> Result<Option<Movie>> {
        if self.done {
            return Ok(None);
        }
        let budget = Budget::current();
        let n = self.next_len();
        let chunk = match &mut self.source {
            Source::Npy(f) => f.next_chunk(n, &budget)?,
            Source::Tiff(t) => t.next_chunk(n, &budget)?,
            Source::Folder { files, next } => {
                if *next >= files.len() {
                    None
                } else {
                    let end = (*next + n).min(files.len());
                    let mut stack =
                        Stack::new(format!("{} (files {}..{end})", self.name, *next), budget);
                    // the frames of a later chunk are held to the movie's first frame (an
                    // error names that file, not the chunk's first)
                    if let (Some(dims), Some(f0)) = (self.first, files.first()) {
                        stack = stack.continuing(&f0.display().to_string(), dims);
                    }
                    for f in &files[*next..end] {
                        frame_into(f, &mut stack)?;
                    }
                    *next = end;
                    Some(stack.into_movie()?)
                }
            }
            Source::Whole(m) => m.take(),
        };
        let Some(chunk) = chunk else {
            self.done = true;
            return Ok(None);
        };
        let (t, h, w) = chunk.dim();
        if t == 0 || h == 0 || w == 0 {
            return Err(BridgeError::InvalidInput(
                format!("{}: empty frames ({h}x{w})", self.name).into(),
            ));
        }
        let kind = chunk.dtype_name();
        match self.first {
            None => {
                self.first = Some((h, w, kind));
                let pixel = match &chunk {
                    Movie::U8(_) => 1,
                    Movie::U16(_) => 2,
                    Movie::F32(_) => 4,
                    Movie::F64(_) => 8,
                };
                self.frame_bytes = Some(h.saturating_mul(w).saturating_mul(pixel));
            }
            Some(f) if f != (h, w, kind) => {
                return Err(BridgeError::InvalidInput(
                    format!(
                        "{}: frames of {h}x{w} {kind} after frames of {}x{} {} (every frame must \
                     have the size and pixel type of the first)",
                        self.name, f.0, f.1, f.2
                    )
                    .into(),
                ));
            }
            Some(_) => {}
        }
        // A whole movie read at once is handed out `n` frames at a time.
        if let Source::Whole(rest) = &mut self.source
            && t > n
        {
            let (head, tail) = split(chunk, n);
            *rest = Some(tail);
            return Ok(Some(head));
        }
        Ok(Some(chunk))
    }
}

/// The first `n` frames of `m` and the rest.
fn split(m: Movie, n: usize) -> (Movie, Movie) {
    use ndarray::s;
    match m {
        Movie::U8(a) => (
            Movie::U8(a.slice(s![..n, .., ..]).to_owned()),
            Movie::U8(a.slice(s![n.., .., ..]).to_owned()),
        ),
        Movie::U16(a) => (
            Movie::U16(a.slice(s![..n, .., ..]).to_owned()),
            Movie::U16(a.slice(s![n.., .., ..]).to_owned()),
        ),
        Movie::F32(a) => (
            Movie::F32(a.slice(s![..n, .., ..]).to_owned()),
            Movie::F32(a.slice(s![n.., .., ..]).to_owned()),
        ),
        Movie::F64(a) => (
            Movie::F64(a.slice(s![..n, .., ..]).to_owned()),
            Movie::F64(a.slice(s![n.., .., ..]).to_owned()),
        ),
    }
}

impl Iterator for MovieStream {
    type Item = Result<Movie>;

    fn next(&mut self) -> Option<Result<Movie>> {
        match self.next_chunk() {
            Ok(Some(m)) => Some(Ok(m)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
