//! Multi-page grayscale TIFF stacks (u8, u16, f32; f64 too) as movies `[T][H][W]`.
//!
//! Every page must be single-channel and have the same size and sample type as the first;
//! anything else is a typed error, never a panic.
//!
//! # ImageJ stacks and hyperstacks
//!
//! A file written by ImageJ says so in its ImageDescription (`ImageJ=…` on the first line,
//! then `images=N`, `channels=C`, `slices=Z`, `frames=T`). Past 4 GB, ImageJ stores a stack as
//! *one* IFD whose strips hold the first image, the other `N − 1` images following it
//! contiguously. Such a file is read as its `N` frames: uncompressed, untiled and with the strips
//! of the first image in one contiguous run only (anything else is refused, named), after
//! checking that the file holds the `N` images it declares and that they fit the memory budget.
//! A hyperstack whose planes are not all time points (`channels` > 1, or both `slices` and
//! `frames` > 1) is refused with the axes it has: its channels or slices would otherwise be read
//! as time frames.
//!
//! # Memory
//!
//! A TIFF page compresses without bound (one deflate strip of zeros can be shared by every page
//! of a file), so the file's size says nothing about what decoding it costs. Pages are decoded
//! one at a time into a [`Stack`], which adds each page's decoded size (checked arithmetic) to a
//! running total *before* decoding it, and refuses with [`BridgeError::TooLarge`] once the
//! total, plus the one page being decoded, exceeds the memory budget taken when the read began
//! ([`bridge_core::host::Budget`]). The decoder's own limit is set from what is left of that
//! budget as well.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use algorithms::detect::Movie;
use bridge_core::host::{Budget, checked_product, format_bytes};
use bridge_core::{BridgeError, Result};
use ndarray::Array3;
use tiff::decoder::{ChunkType, Decoder, DecodingResult, Limits};
use tiff::tags::Tag;

use super::axes::ImageJ;

fn terr(path: &str, e: impl std::fmt::Display) -> BridgeError {
    BridgeError::InvalidInput(format!("{path}: cannot decode TIFF: {e}").into())
}

/// The pixel formats read (single-channel, greyscale), for error messages.
pub const SUPPORTED: &str =
    "single-channel greyscale of 8- or 16-bit unsigned integers, or 32- or 64-bit floats";

/// Pixels of one decoded page (or of every page of a [`Stack`], concatenated).
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

    fn len(&self) -> usize {
        match self {
            Page::U8(v) => v.len(),
            Page::U16(v) => v.len(),
            Page::F32(v) => v.len(),
            Page::F64(v) => v.len(),
        }
    }

    /// Append `other` (same kind) to `self` without over-allocating; false when kinds differ.
    fn append(
        &mut self,
        other: Page,
    ) -> std::result::Result<bool, std::collections::TryReserveError> {
        macro_rules! app {
            ($a:expr, $b:expr) => {{
                $a.try_reserve_exact($b.len())?;
                $a.extend($b);
                Ok(true)
            }};
        }
        match (self, other) {
            (Page::U8(a), Page::U8(b)) => app!(a, b),
            (Page::U16(a), Page::U16(b)) => app!(a, b),
            (Page::F32(a), Page::F32(b)) => app!(a, b),
            (Page::F64(a), Page::F64(b)) => app!(a, b),
            _ => Ok(false),
        }
    }
}

/// Bytes per pixel of a page kind.
fn kind_size(kind: &str) -> u64 {
    match kind {
        "u8" => 1,
        "u16" => 2,
        "f32" => 4,
        _ => 8,
    }
}

/// Pages of one movie (a multi-page file, or a folder of single-page files) being assembled
/// under one memory budget: every page must have the size and pixel type of the first, and the
/// running total of decoded bytes is checked before each page is decoded.
#[derive(Debug)]
pub struct Stack {
    name: String,
    first: Option<String>,
    budget: Budget,
    dims: Option<(usize, usize, &'static str)>,
    pages: usize,
    bytes: u64,
    data: Option<Page>,
}

impl Stack {
    /// An empty stack for the movie `name` (a file or a folder), checked against `budget`.
    pub fn new(name: impl Into<String>, budget: Budget) -> Self {
        Stack {
            name: name.into(),
            first: None,
            budget,
            dims: None,
            pages: 0,
            bytes: 0,
            data: None,
        }
    }

    /// A stack continuing a movie whose first frame (`first`, named in errors) was `h × w`
    /// pixels of `kind`: every page admitted must match it.
    pub fn continuing(mut self, first: &str, (h, w, kind): (usize, usize, &'static str)) -> Self {
        self.dims = Some((h, w, kind));
        self.first = Some(first.to_string());
        self
    }

    /// Pages so far.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Bytes of the budget not yet taken by the stacked pages.
    pub fn remaining(&self) -> u64 {
        self.budget.limit.0.saturating_sub(self.bytes)
    }

    /// Check that one more page of `h × w` pixels of `kind` from `source` may be decoded: same
    /// size and type as the first, and the running total (plus the page itself, decoded before
    /// it is appended) within the budget. Returns the bytes the decoder may use for it.
    pub fn admit(&mut self, source: &str, h: usize, w: usize, kind: &'static str) -> Result<u64> {
        if h == 0 || w == 0 {
            return Err(BridgeError::InvalidInput(
                format!("{source}: empty image ({h}x{w})").into(),
            ));
        }
        if let Some((h0, w0, k0)) = self.dims {
            if (h0, w0) != (h, w) {
                return Err(BridgeError::shape_mismatch(
                    format!(
                        "{h0}x{w0} (the size of the first frame, {})",
                        self.first.as_deref().unwrap_or("")
                    ),
                    format!("{h}x{w}"),
                    source.to_string(),
                ));
            }
            if k0 != kind {
                return Err(BridgeError::InvalidInput(
                    format!(
                        "{source}: pixels are {kind} but those of the first frame ({}) are {k0} \
                     (every frame must have the same pixel type)",
                        self.first.as_deref().unwrap_or("")
                    )
                    .into(),
                ));
            }
        }
        let page = checked_product(&[h as u64, w as u64, kind_size(kind)]).unwrap_or(u64::MAX);
        let total = self.bytes.saturating_add(page);
        let n = self.pages + 1;
        self.budget.check(
            total.saturating_add(page),
            &format!(
                "{} ({n} page{} of {h}x{w} {kind}: {} decoded, plus the page being decoded)",
                self.name,
                if n == 1 { "" } else { "s" },
                format_bytes(total)
            ),
            "read fewer or smaller frames (split the stack), or run on a machine with more memory",
        )?;
        self.dims = Some((h, w, kind));
        self.first.get_or_insert_with(|| source.to_string());
        // What the decoder may allocate for this page: the budget less the stacked pages.
        Ok(self.remaining().max(page))
    }

    /// Append a decoded page admitted by [`Stack::admit`].
    pub fn push(&mut self, source: &str, page: Page) -> Result<()> {
        let Some((h, w, kind)) = self.dims else {
            return Err(BridgeError::InvalidInput(
                format!("{source}: page decoded before it was sized").into(),
            ));
        };
        if page.len() != h * w || page.kind() != kind {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{source}: decoded {} {} pixels where the header declares {h}x{w} {kind} \
                 (corrupt file?)",
                    page.len(),
                    page.kind()
                )
                .into(),
            ));
        }
        let bytes = page.len() as u64 * kind_size(kind);
        match &mut self.data {
            None => self.data = Some(page),
            Some(d) => match d.append(page) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(BridgeError::InvalidInput(
                        format!("{source}: mixed pixel types").into(),
                    ));
                }
                Err(_) => {
                    return Err(BridgeError::TooLarge {
                        what: format!("{} ({} pages)", self.name, self.pages + 1),
                        requested: self.bytes + bytes,
                        limit: self.budget.limit.0,
                        limited_by: "the allocator refused".into(),
                        hint: "run on a machine with more memory".into(),
                    });
                }
            },
        }
        self.pages += 1;
        self.bytes += bytes;
        Ok(())
    }

    /// The stacked movie `[pages][H][W]`.
    pub fn into_movie(self) -> Result<Movie> {
        let (Some((h, w, _)), Some(data)) = (self.dims, self.data) else {
            return Err(BridgeError::InvalidInput(
                format!("{}: no image", self.name).into(),
            ));
        };
        let t = self.pages;
        let name = self.name;
        let shape =
            |e: ndarray::ShapeError| BridgeError::InvalidInput(format!("{name}: {e}").into());
        Ok(match data {
            Page::U8(v) => Movie::U8(Array3::from_shape_vec((t, h, w), v).map_err(shape)?),
            Page::U16(v) => Movie::U16(Array3::from_shape_vec((t, h, w), v).map_err(shape)?),
            Page::F32(v) => Movie::F32(Array3::from_shape_vec((t, h, w), v).map_err(shape)?),
            Page::F64(v) => Movie::F64(Array3::from_shape_vec((t, h, w), v).map_err(shape)?),
        })
    }
}

/// The ImageJ description of the decoder's current image, if it has one (only its first 4 KiB
/// are read: the keys read come first; a description that cannot be read counts as none).
fn imagej_of<R: Read + Seek>(dec: &mut Decoder<R>) -> Option<ImageJ> {
    let mut buf = [0u8; 4096];
    let n = dec
        .image_ifd()
        .find_tag_bytes(Tag::ImageDescription, &mut buf, 0)
        .ok()
        .flatten()?;
    ImageJ::parse(&String::from_utf8_lossy(&buf[..n.min(buf.len())]))
}

/// The images of an ImageJ stack stored after one IFD (as ImageJ writes stacks past 4 GB):
/// `images` images of `h × w` `kind` pixels, `frame_bytes` each, from byte `start` on,
/// uncompressed, in the file's byte order.
#[derive(Debug, Clone, Copy)]
struct Contiguous {
    start: u64,
    frame_bytes: usize,
    images: u64,
    h: usize,
    w: usize,
    kind: &'static str,
    big_endian: bool,
    /// PhotometricInterpretation WhiteIsZero: inverted as the decoder does for one IFD.
    invert: bool,
}

impl Contiguous {
    /// Check that the decoder's current (only) IFD can hold `ij.images` contiguous images and
    /// that the file is long enough for them.
    fn plan<R: Read + Seek>(dec: &mut Decoder<R>, path: &str, ij: ImageJ) -> Result<Self> {
        let (w, h) = dec.dimensions().map_err(|e| terr(path, e))?;
        let (h, w) = (h as usize, w as usize);
        if h == 0 || w == 0 {
            return Err(BridgeError::InvalidInput(
                format!("{path}: empty image ({h}x{w})").into(),
            ));
        }
        let kind = page_kind(dec, path, 0)?;
        let images = ij.images;
        let refuse = |why: String| {
            BridgeError::Unsupported(format!(
                "{path}: an ImageJ stack of {images} images stored after one IFD (as ImageJ \
                 writes stacks past 4 GB) {why}; only uncompressed ones, the first image in one \
                 run of strips, can be read: save the stack again uncompressed, or as one TIFF \
                 per frame"
            ))
        };
        let tag = |dec: &mut Decoder<R>, t: Tag| -> Result<Option<u64>> {
            dec.find_tag_unsigned::<u64>(t).map_err(|e| terr(path, e))
        };
        let compression = tag(dec, Tag::Compression)?.unwrap_or(1);
        if compression != 1 {
            return Err(refuse(format!(
                "is compressed (Compression = {compression})"
            )));
        }
        if dec.get_chunk_type() == ChunkType::Tile {
            return Err(refuse("is tiled".into()));
        }
        let predictor = tag(dec, Tag::Predictor)?.unwrap_or(1);
        if predictor != 1 {
            return Err(refuse(format!(
                "uses a predictor (Predictor = {predictor})"
            )));
        }
        let invert = tag(dec, Tag::PhotometricInterpretation)? == Some(0);
        let vec = |dec: &mut Decoder<R>, t: Tag| -> Result<Vec<u64>> {
            Ok(dec
                .find_tag_unsigned_vec::<u64>(t)
                .map_err(|e| terr(path, e))?
                .unwrap_or_default())
        };
        let offsets = vec(dec, Tag::StripOffsets)?;
        let counts = vec(dec, Tag::StripByteCounts)?;
        if offsets.is_empty() || offsets.len() != counts.len() {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{path}: {} strip offsets and {} strip byte counts (corrupt file?)",
                    offsets.len(),
                    counts.len()
                )
                .into(),
            ));
        }
        let frame = checked_product(&[h as u64, w as u64, kind_size(kind)]).unwrap_or(u64::MAX);
        let run = offsets
            .iter()
            .zip(&counts)
            .try_fold(offsets[0], |end, (&o, &c)| {
                (o == end).then(|| o.checked_add(c)).flatten()
            });
        if run.and_then(|end| end.checked_sub(offsets[0])) != Some(frame) {
            return Err(refuse(format!(
                "has its first image in {} strips that are not one run of the {} of a {h}x{w} \
                 {kind} image",
                offsets.len(),
                format_bytes(frame)
            )));
        }
        let start = offsets[0];
        let file_len = dec
            .inner()
            .seek(SeekFrom::End(0))
            .map_err(|e| BridgeError::io(path.to_string(), e))?;
        let data = frame.checked_mul(images);
        if data
            .and_then(|d| d.checked_add(start))
            .is_none_or(|end| end > file_len)
        {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{path}: the ImageJ description declares {images} images of {h}x{w} {kind} ({} \
                 from byte {start} on), but the file holds {}: it is truncated, or its \
                 description is wrong (copy or export the file again)",
                    data.map_or("more than any file holds".to_string(), format_bytes),
                    format_bytes(file_len)
                )
                .into(),
            ));
        }
        let frame_bytes = usize::try_from(frame).map_err(|_| {
            BridgeError::InvalidInput(
                format!("{path}: a {h}x{w} {kind} image does not fit this machine's address space")
                    .into(),
            )
        })?;
        Ok(Contiguous {
            start,
            frame_bytes,
            images,
            h,
            w,
            kind,
            big_endian: matches!(dec.byte_order(), tiff::tags::ByteOrder::BigEndian),
            invert,
        })
    }

    /// Read images `from..to` onto `stack` (each admitted before it is read).
    fn read_into<R: Read + Seek>(
        &self,
        r: &mut R,
        path: &str,
        from: u64,
        to: u64,
        stack: &mut Stack,
    ) -> Result<()> {
        for k in from..to.min(self.images) {
            let source = format!("{path} image {k}");
            stack.admit(&source, self.h, self.w, self.kind)?;
            // k < images and start + images · frame_bytes ≤ the file's length: no overflow.
            let at = self.start + k * self.frame_bytes as u64;
            let mut raw: Vec<u8> = Vec::new();
            raw.try_reserve_exact(self.frame_bytes)
                .map_err(|_| BridgeError::TooLarge {
                    what: source.clone(),
                    requested: self.frame_bytes as u64,
                    limit: stack.budget.limit.0,
                    limited_by: "the allocator refused".into(),
                    hint: "run on a machine with more memory".into(),
                })?;
            raw.resize(self.frame_bytes, 0);
            r.seek(SeekFrom::Start(at))
                .and_then(|_| r.read_exact(&mut raw))
                .map_err(|e| terr(&source, e))?;
            stack.push(&source, self.page(raw))?;
        }
        Ok(())
    }

    /// The pixels of one image's bytes, in the host's byte order.
    fn page(&self, mut raw: Vec<u8>) -> Page {
        let (be, inv) = (self.big_endian, self.invert);
        macro_rules! conv {
            ($t:ty, $n:literal, $inv:expr) => {
                raw.chunks_exact($n)
                    .map(|c| {
                        let b: [u8; $n] = c.try_into().unwrap_or([0; $n]);
                        let v = if be {
                            <$t>::from_be_bytes(b)
                        } else {
                            <$t>::from_le_bytes(b)
                        };
                        if inv { $inv(v) } else { v }
                    })
                    .collect()
            };
        }
        match self.kind {
            "u8" => {
                if inv {
                    raw.iter_mut().for_each(|x| *x = !*x);
                }
                Page::U8(raw)
            }
            "u16" => Page::U16(conv!(u16, 2, |v: u16| u16::MAX - v)),
            "f32" => Page::F32(conv!(f32, 4, |v: f32| 1.0 - v)),
            _ => Page::F64(conv!(f64, 8, |v: f64| 1.0 - v)),
        }
    }
}

/// The page kind of the decoder's current image, or a typed error naming what is unsupported.
fn page_kind<R: Read + Seek>(
    dec: &mut Decoder<R>,
    path: &str,
    page: usize,
) -> Result<&'static str> {
    let ct = dec.colortype().map_err(|e| terr(path, e))?;
    let tiff::ColorType::Gray(bits) = ct else {
        return Err(BridgeError::Unsupported(format!(
            "{path}: page {page} has color type {ct:?}; only single-channel greyscale is \
             supported ({SUPPORTED})"
        )));
    };
    let format = dec
        .find_tag_unsigned_vec::<u16>(Tag::SampleFormat)
        .map_err(|e| terr(path, e))?
        .and_then(|v| v.first().copied())
        .unwrap_or(1);
    match (format, bits) {
        (1, 8) => Ok("u8"),
        (1, 16) => Ok("u16"),
        (3, 32) => Ok("f32"),
        (3, 64) => Ok("f64"),
        _ => {
            let f = match format {
                1 => "unsigned integer",
                2 => "signed integer",
                3 => "floating-point",
                _ => "undefined-format",
            };
            Err(BridgeError::Unsupported(format!(
                "{path}: page {page} has {bits}-bit {f} pixels, an unsupported pixel format \
                 (supported: {SUPPORTED})"
            )))
        }
    }
}

/// Decode every page of a TIFF stream onto `stack` (whose running total and frame size they
/// share); returns how many pages the stream held. With `single_frame`, a stream of more than
/// one page is refused before any is decoded.
pub fn decode_into<R: Read + Seek>(
    reader: R,
    path: &str,
    stack: &mut Stack,
    single_frame: bool,
) -> Result<usize> {
    let mut dec = Decoder::new(reader).map_err(|e| terr(path, e))?;
    let ij = imagej_of(&mut dec);
    if let Some(ij) = ij {
        ij.check_hyperstack(path)?;
    }
    // An ImageJ stack in one IFD (ImageJ's layout past 4 GB).
    let one_ifd = ij.filter(|ij| ij.images > 1 && !dec.more_images());
    if single_frame && (dec.more_images() || one_ifd.is_some()) {
        return Err(BridgeError::InvalidInput(
            format!(
                "{path}: expected a single-frame image, found several pages (a folder holds one \
             frame per file; read a multi-page TIFF on its own)"
            )
            .into(),
        ));
    }
    if let Some(ij) = one_ifd {
        let plan = Contiguous::plan(&mut dec, path, ij)?;
        // The whole stack is read: its declared size is checked before the first image.
        let total = (plan.frame_bytes as u64).saturating_mul(plan.images);
        stack.budget.check(
            stack.bytes.saturating_add(total),
            &format!(
                "{path} ({} images of {}x{} {}, as its ImageJ description declares)",
                plan.images, plan.h, plan.w, plan.kind
            ),
            "read the movie in chunks (arraybridge detect streams it), crop or split the stack, \
             or run on a machine with more memory",
        )?;
        plan.read_into(dec.inner(), path, 0, plan.images, stack)?;
        return usize::try_from(plan.images).map_err(|_| {
            BridgeError::InvalidInput(format!("{path}: too many images for this machine").into())
        });
    }
    let mut n = 0;
    loop {
        dec = decode_page(dec, path, n, stack)?;
        n += 1;
        if !dec.more_images() {
            break;
        }
        dec.next_image().map_err(|e| terr(path, e))?;
    }
    Ok(n)
}

/// Decode the decoder's current page (page `n` of `path`) onto `stack`.
fn decode_page<R: Read + Seek>(
    mut dec: Decoder<R>,
    path: &str,
    n: usize,
    stack: &mut Stack,
) -> Result<Decoder<R>> {
    let (w, h) = dec.dimensions().map_err(|e| terr(path, e))?;
    let kind = page_kind(&mut dec, path, n)?;
    let source = if n == 0 && !dec.more_images() {
        path.to_string()
    } else {
        format!("{path} page {n}")
    };
    let allowed = stack.admit(&source, h as usize, w as usize, kind)?;
    let mut limits = Limits::default();
    limits.decoding_buffer_size = usize::try_from(allowed).unwrap_or(usize::MAX);
    let mut dec = dec.with_limits(limits);
    let page = match dec.read_image().map_err(|e| terr(&source, e))? {
        DecodingResult::U8(v) => Page::U8(v),
        DecodingResult::U16(v) => Page::U16(v),
        DecodingResult::F32(v) => Page::F32(v),
        DecodingResult::F64(v) => Page::F64(v),
        _ => {
            return Err(BridgeError::Unsupported(format!(
                "{source}: unsupported pixel format (supported: {SUPPORTED})"
            )));
        }
    };
    stack.push(&source, page)?;
    Ok(dec)
}

/// The pages of a multi-page TIFF read a chunk at a time (the streaming reader of
/// [`super::stream::MovieStream`]): only one chunk is decoded at once.
pub struct TiffPages {
    dec: Option<Decoder<BufReader<std::fs::File>>>,
    path: String,
    page: usize,
    done: bool,
    /// An ImageJ stack in one IFD: its images are read from the file directly.
    one_ifd: Option<Contiguous>,
}

impl TiffPages {
    /// Open `path` (its first page's header is read). An ImageJ hyperstack whose planes are not
    /// all time points is refused here; an ImageJ stack in one IFD is checked against the
    /// file's length (see the [module docs](self)).
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, false)
    }

    /// [`Self::open`] for a stack read as volumes of consecutive planes: an ImageJ hyperstack
    /// of slices at several time points is accepted (its planes are z-major within each time
    /// point); several channels are still refused.
    pub fn open_planes(path: &Path) -> Result<Self> {
        Self::open_with(path, true)
    }

    fn open_with(path: &Path, planes: bool) -> Result<Self> {
        let name = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
        let mut dec = Decoder::new(BufReader::new(f)).map_err(|e| terr(&name, e))?;
        let ij = imagej_of(&mut dec);
        if let Some(ij) = ij {
            if planes {
                ImageJ { slices: 1, ..ij }.check_hyperstack(&name)?;
            } else {
                ij.check_hyperstack(&name)?;
            }
        }
        let one_ifd = match ij.filter(|ij| ij.images > 1 && !dec.more_images()) {
            Some(ij) => Some(Contiguous::plan(&mut dec, &name, ij)?),
            None => None,
        };
        Ok(TiffPages {
            dec: Some(dec),
            path: name,
            page: 0,
            done: false,
            one_ifd,
        })
    }

    /// The frames of an ImageJ stack stored in one IFD (known from its description); `None`
    /// for other TIFFs, whose pages are counted as they are read.
    pub fn declared_frames(&self) -> Option<usize> {
        self.one_ifd.and_then(|c| usize::try_from(c.images).ok())
    }

    /// The next (at most) `n` pages as a movie, decoded under `budget`; `None` at the end.
    pub fn next_chunk(&mut self, n: usize, budget: &Budget) -> Result<Option<Movie>> {
        let Some(mut dec) = self.dec.take().filter(|_| !self.done) else {
            return Ok(None);
        };
        if let Some(plan) = self.one_ifd {
            let mut stack = Stack::new(
                format!("{} (images from {})", self.path, self.page),
                *budget,
            );
            let from = self.page as u64;
            let to = from.saturating_add(n.max(1) as u64).min(plan.images);
            plan.read_into(dec.inner(), &self.path, from, to, &mut stack)?;
            self.page = usize::try_from(to).unwrap_or(usize::MAX);
            self.done = to >= plan.images;
            self.dec = Some(dec);
            return stack.into_movie().map(Some);
        }
        let mut stack = Stack::new(format!("{} (pages from {})", self.path, self.page), *budget);
        for _ in 0..n.max(1) {
            dec = decode_page(dec, &self.path, self.page, &mut stack)?;
            self.page += 1;
            if !dec.more_images() {
                self.done = true;
                break;
            }
            dec.next_image().map_err(|e| terr(&self.path, e))?;
        }
        self.dec = Some(dec);
        stack.into_movie().map(Some)
    }
}

/// Read a (multi-page) TIFF file as a movie `[pages][H][W]`.
pub fn read_movie(path: &Path) -> Result<Movie> {
    read_movie_with_budget(path, &Budget::current())
}

/// [`read_movie`] under an explicit memory budget (tests simulate a small machine with it).
pub fn read_movie_with_budget(path: &Path, budget: &Budget) -> Result<Movie> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let mut stack = Stack::new(name.clone(), *budget);
    decode_into(BufReader::new(f), &name, &mut stack, false)?;
    stack.into_movie()
}
