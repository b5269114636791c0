//! A small, defensive reader for NumPy `.npy` files (format versions 1.0, 2.0 and 3.0).
//!
//! Checks the magic string, the version, the header length and its dictionary (`descr`,
//! `fortran_order`, `shape`), the dtype, and that the payload holds exactly
//! `prod(shape) · itemsize` bytes. Every problem is a typed [`BridgeError`]; nothing panics.
//! Supported dtypes: `u1`, `u2`, `f4`, `f8` (little- or big-endian); Fortran-ordered arrays are
//! transposed to C order.
//!
//! [`read_npy`] reads the header alone first (at most [`MAX_HEADER_LEN`] bytes), computes the
//! payload size with checked arithmetic, compares it with the file's length and checks the
//! decoded array against the host memory budget ([`bridge_core::host`]) before it reads the
//! payload, straight into the typed array (no second copy of the raw bytes).
//!
//! Kept instead of `ndarray-npy` because the movie readers learn the element type from the file
//! and dispatch on it at run time, while `ndarray-npy` needs it at compile time (the header would
//! have to be parsed here anyway); because every size is checked against the file and the host
//! memory budget, with arraybridge's typed errors, before anything is allocated; and because it
//! needs no extra dependency. Big-endian payloads and Fortran order are handled here too.

use std::io::Read;
use std::path::Path;

use algorithms::detect::Movie;
use bridge_core::host::{Budget, format_bytes};
use bridge_core::{BridgeError, Result};
use ndarray::{Array3, ArrayD, IxDyn};

/// Element type of a `.npy` payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NpyDType {
    /// `u1`
    U8,
    /// `u2`
    U16,
    /// `f4`
    F32,
    /// `f8`
    F64,
}

impl NpyDType {
    /// NumPy's name for it (`uint8`, ...).
    pub fn name(self) -> &'static str {
        match self {
            NpyDType::U8 => "uint8",
            NpyDType::U16 => "uint16",
            NpyDType::F32 => "float32",
            NpyDType::F64 => "float64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            NpyDType::U8 => 1,
            NpyDType::U16 => 2,
            NpyDType::F32 => 4,
            NpyDType::F64 => 8,
        }
    }
}

/// The parsed header of a `.npy` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Element type.
    pub dtype: NpyDType,
    /// True for big-endian data.
    pub big_endian: bool,
    /// Fortran (column-major) order.
    pub fortran_order: bool,
    /// Shape.
    pub shape: Vec<usize>,
    /// Offset of the payload in the file.
    pub data_offset: usize,
}

/// A loaded array in C order.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyArray {
    /// `u1` data.
    U8(ArrayD<u8>),
    /// `u2` data.
    U16(ArrayD<u16>),
    /// `f4` data.
    F32(ArrayD<f32>),
    /// `f8` data.
    F64(ArrayD<f64>),
}

impl NpyArray {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            NpyArray::U8(a) => a.shape(),
            NpyArray::U16(a) => a.shape(),
            NpyArray::F32(a) => a.shape(),
            NpyArray::F64(a) => a.shape(),
        }
    }
}

fn invalid(path: &str, msg: impl std::fmt::Display) -> BridgeError {
    BridgeError::InvalidInput(format!("{path}: not a valid .npy file: {msg}").into())
}

/// Value of `key` in a Python dict literal, as raw text up to the next top-level comma.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let pat1 = format!("'{key}'");
    let pat2 = format!("\"{key}\"");
    let pos = header
        .find(&pat1)
        .map(|p| p + pat1.len())
        .or_else(|| header.find(&pat2).map(|p| p + pat2.len()))?;
    let rest = header[pos..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    Some(rest.trim())
}

/// Parse the header of a `.npy` byte buffer.
pub fn parse_header(bytes: &[u8], path: &str) -> Result<NpyHeader> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(invalid(path, "missing the \\x93NUMPY magic string"));
    }
    let major = bytes[6];
    let (hlen, start) = match major {
        1 => (
            usize::from(u16::from_le_bytes([bytes[8], bytes[9]])),
            10usize,
        ),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(invalid(path, "truncated header"));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12usize,
            )
        }
        v => {
            return Err(invalid(
                path,
                format!("unsupported format version {v}.{}", bytes[7]),
            ));
        }
    };
    let end = start
        .checked_add(hlen)
        .ok_or_else(|| invalid(path, "header length overflows"))?;
    if end > bytes.len() {
        return Err(invalid(
            path,
            format!(
                "header length {hlen} runs past the end of the file ({} bytes)",
                bytes.len()
            ),
        ));
    }
    let header =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| invalid(path, "header is not text"))?;
    let header = header.trim();
    if !header.starts_with('{') {
        return Err(invalid(path, "header is not a dictionary"));
    }
    let descr =
        dict_value(header, "descr").ok_or_else(|| invalid(path, "header has no 'descr'"))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let (order, code) = descr.split_at_checked(1).unwrap_or((descr, ""));
    let big_endian = match order {
        "<" | "|" | "=" => false,
        ">" => true,
        _ => return Err(invalid(path, format!("unsupported dtype {descr:?}"))),
    };
    let dtype = match code {
        "u1" | "B" => NpyDType::U8,
        "u2" => NpyDType::U16,
        "f4" => NpyDType::F32,
        "f8" => NpyDType::F64,
        _ => {
            return Err(BridgeError::Unsupported(format!(
                "{path}: dtype {descr:?} (supported: uint8, uint16, float32, float64)"
            )));
        }
    };
    let fortran_order = match dict_value(header, "fortran_order") {
        Some("True") => true,
        Some("False") => false,
        other => return Err(invalid(path, format!("bad 'fortran_order' {other:?}"))),
    };
    let shape_txt =
        dict_value(header, "shape").ok_or_else(|| invalid(path, "header has no 'shape'"))?;
    let inner = shape_txt
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| invalid(path, format!("bad shape {shape_txt:?}")))?;
    let shape = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<std::result::Result<Vec<usize>, _>>()
        .map_err(|_| invalid(path, format!("bad shape {shape_txt:?}")))?;
    Ok(NpyHeader {
        dtype,
        big_endian,
        fortran_order,
        shape,
        data_offset: end,
    })
}

/// Largest header accepted, in bytes (NumPy itself refuses headers over 10 000 bytes by default).
pub const MAX_HEADER_LEN: usize = 1 << 20;

impl NpyHeader {
    /// Elements and payload bytes, with checked arithmetic.
    fn sizes(&self, path: &str) -> Result<(usize, usize)> {
        let count = self
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| invalid(path, format!("shape {:?} overflows", self.shape)))?;
        let nbytes = count
            .checked_mul(self.dtype.size())
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                invalid(
                    path,
                    format!("shape {:?} of {} overflows", self.shape, self.dtype.name()),
                )
            })?;
        Ok((count, nbytes))
    }

    /// Check the payload length and that the decoded array fits `budget`.
    fn check(&self, payload_len: u64, path: &str, budget: &Budget) -> Result<usize> {
        let (count, nbytes) = self.sizes(path)?;
        if payload_len != nbytes as u64 {
            return Err(BridgeError::shape_mismatch(
                format!(
                    "{nbytes} data bytes for shape {:?} of {}",
                    self.shape,
                    self.dtype.name()
                ),
                format!(
                    "{payload_len} bytes{}",
                    if payload_len < nbytes as u64 {
                        " (truncated file?)"
                    } else {
                        ""
                    }
                ),
                path.to_string(),
            ));
        }
        // The array, plus a second copy while a Fortran-ordered one is transposed.
        let copies = if self.fortran_order { 2 } else { 1 };
        budget.check(
            (nbytes as u64).saturating_mul(copies),
            &format!("{path} (shape {:?} of {})", self.shape, self.dtype.name()),
            "crop or subsample the array, or read it on a machine with more memory",
        )?;
        Ok(count)
    }
}

/// Decode `count` elements from `payload` (exactly `count · itemsize` bytes) without an
/// intermediate copy of the raw bytes (beyond a small chunk).
fn decode_payload<R: Read>(
    h: &NpyHeader,
    count: usize,
    mut payload: R,
    path: &str,
) -> Result<NpyArray> {
    let io_err = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            invalid(path, "the file ended before its data (truncated?)")
        } else {
            BridgeError::io(path.to_string(), e)
        }
    };
    let alloc = |what: usize| {
        BridgeError::InvalidInput(
            format!(
                "{path}: could not allocate {} for the array",
                format_bytes(what as u64)
            )
            .into(),
        )
    };
    fn typed<T: Copy + Default, const N: usize, R: Read>(
        count: usize,
        payload: &mut R,
        conv: impl Fn([u8; N]) -> T,
        io_err: &dyn Fn(std::io::Error) -> BridgeError,
        alloc: &dyn Fn(usize) -> BridgeError,
    ) -> Result<Vec<T>> {
        let mut v: Vec<T> = Vec::new();
        v.try_reserve_exact(count).map_err(|_| alloc(count * N))?;
        let mut chunk = vec![0u8; (1 << 16) * N];
        let mut left = count;
        while left > 0 {
            let n = left.min(1 << 16);
            let buf = &mut chunk[..n * N];
            payload.read_exact(buf).map_err(io_err)?;
            v.extend(buf.chunks_exact(N).map(|c| {
                let mut b = [0u8; N];
                b.copy_from_slice(c);
                conv(b)
            }));
            left -= n;
        }
        Ok(v)
    }
    // Fortran order: read with the reversed shape, then transpose back.
    let read_shape: Vec<usize> = if h.fortran_order {
        h.shape.iter().rev().copied().collect()
    } else {
        h.shape.clone()
    };
    fn build<T: Clone>(shape: &[usize], v: Vec<T>, fortran: bool, path: &str) -> Result<ArrayD<T>> {
        let a = ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| invalid(path, e))?;
        Ok(if fortran {
            a.reversed_axes().as_standard_layout().into_owned()
        } else {
            a
        })
    }
    let be = h.big_endian;
    let f = h.fortran_order;
    Ok(match h.dtype {
        NpyDType::U8 => {
            let mut v: Vec<u8> = Vec::new();
            v.try_reserve_exact(count).map_err(|_| alloc(count))?;
            v.resize(count, 0);
            payload.read_exact(&mut v).map_err(io_err)?;
            NpyArray::U8(build(&read_shape, v, f, path)?)
        }
        NpyDType::U16 => {
            let conv = |b: [u8; 2]| {
                if be {
                    u16::from_be_bytes(b)
                } else {
                    u16::from_le_bytes(b)
                }
            };
            let v = typed(count, &mut payload, conv, &io_err, &alloc)?;
            NpyArray::U16(build(&read_shape, v, f, path)?)
        }
        NpyDType::F32 => {
            let conv = |b: [u8; 4]| {
                if be {
                    f32::from_be_bytes(b)
                } else {
                    f32::from_le_bytes(b)
                }
            };
            let v = typed(count, &mut payload, conv, &io_err, &alloc)?;
            NpyArray::F32(build(&read_shape, v, f, path)?)
        }
        NpyDType::F64 => {
            let conv = |b: [u8; 8]| {
                if be {
                    f64::from_be_bytes(b)
                } else {
                    f64::from_le_bytes(b)
                }
            };
            let v = typed(count, &mut payload, conv, &io_err, &alloc)?;
            NpyArray::F64(build(&read_shape, v, f, path)?)
        }
    })
}

/// Decode a whole `.npy` byte buffer.
pub fn parse_npy(bytes: &[u8], path: &str) -> Result<NpyArray> {
    let h = parse_header(bytes, path)?;
    let payload = &bytes[h.data_offset..];
    let count = h.check(payload.len() as u64, path, &Budget::current())?;
    decode_payload(&h, count, payload, path)
}

/// Read a `.npy` file.
///
/// Only the header is read before the sizes are checked: the payload must hold exactly
/// `prod(shape) · itemsize` bytes and the decoded array must fit the host memory budget
/// ([`bridge_core::host`]), so a multi-gigabyte or lying file is refused before anything large
/// is allocated.
pub fn read_npy(path: &Path) -> Result<NpyArray> {
    read_npy_with_budget(path, &Budget::current())
}

/// [`read_npy`] under an explicit memory budget (tests simulate a small machine with it).
pub fn read_npy_with_budget(path: &Path, budget: &Budget) -> Result<NpyArray> {
    let (h, payload, file_len) = open_header(path)?;
    let name = path.display().to_string();
    let count = h.check(file_len - h.data_offset as u64, &name, budget)?;
    decode_payload(&h, count, payload, &name)
}

/// The payload of an opened `.npy` file: the bytes read with the header, then the file.
type Payload = std::io::Chain<std::io::Cursor<Vec<u8>>, std::io::BufReader<std::fs::File>>;

/// Open `path`, read and check its header (nothing else); returns the header, a reader
/// positioned at the payload and the file length.
fn open_header(path: &Path) -> Result<(NpyHeader, Payload, u64)> {
    let name = path.display().to_string();
    let io = |e: std::io::Error| BridgeError::io(name.clone(), e);
    let f = std::fs::File::open(path).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(invalid(&name, "it is a folder"));
    }
    let file_len = meta.len();
    let mut r = std::io::BufReader::new(f);
    // Magic, version and header length first (10 or 12 bytes), then the header itself.
    let mut head = Vec::with_capacity(12);
    (&mut r).take(12).read_to_end(&mut head).map_err(io)?;
    let hlen = match head.get(6) {
        _ if head.len() < 10 || &head[..6] != b"\x93NUMPY" => {
            return Err(invalid(&name, "missing the \\x93NUMPY magic string"));
        }
        Some(1) => usize::from(u16::from_le_bytes([head[8], head[9]])) + 10,
        Some(2 | 3) if head.len() == 12 => {
            (u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize).saturating_add(12)
        }
        _ => {
            // Unsupported version or a short version-2/3 prefix: parse_header says which.
            return Err(parse_header(&head, &name)
                .err()
                .unwrap_or_else(|| invalid(&name, "truncated header")));
        }
    };
    if hlen > MAX_HEADER_LEN {
        return Err(invalid(
            &name,
            format!("header length {hlen} exceeds {MAX_HEADER_LEN} bytes (corrupt header?)"),
        ));
    }
    if hlen as u64 > file_len {
        return Err(invalid(
            &name,
            format!("header length {hlen} runs past the end of the file ({file_len} bytes)"),
        ));
    }
    if hlen > head.len() {
        (&mut r)
            .take((hlen - head.len()) as u64)
            .read_to_end(&mut head)
            .map_err(io)?;
    }
    let h = parse_header(&head, &name)?;
    // `head` may hold a few payload bytes already (a version-1 header is 10 bytes + hlen).
    let already = head.split_off(h.data_offset.min(head.len()));
    Ok((h, std::io::Cursor::new(already).chain(r), file_len))
}

/// The frames of a C-ordered `.npy` movie `(T, H, W)` (or frame `(H, W)`) read a chunk at a
/// time (the streaming reader of [`super::stream::MovieStream`]): only one chunk is in memory.
pub struct NpyFrames {
    header: NpyHeader,
    payload: Payload,
    name: String,
    frames: usize,
    next: usize,
}

impl NpyFrames {
    /// Open `path` and check its header and length. A Fortran-ordered array (whose frames are
    /// not contiguous in the file) is [`BridgeError::Unsupported`]: read it whole instead.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, false)
    }

    /// [`Self::open`] for an array read as planes: a 4-D `(T, Z, Y, X)` array is its `T · Z`
    /// planes in file order (the planes of volume 0, then volume 1, …).
    pub fn open_planes(path: &Path) -> Result<Self> {
        Self::open_with(path, true)
    }

    fn open_with(path: &Path, planes: bool) -> Result<Self> {
        let (header, payload, file_len) = open_header(path)?;
        let name = path.display().to_string();
        let (_, nbytes) = header.sizes(&name)?;
        if file_len - header.data_offset as u64 != nbytes as u64 {
            // The whole-file check gives the detailed message.
            header.check(
                file_len - header.data_offset as u64,
                &name,
                &Budget::current(),
            )?;
        }
        if header.fortran_order {
            return Err(BridgeError::Unsupported(format!(
                "{name}: a Fortran-ordered array cannot be streamed frame by frame (save it in \
                 C order: numpy.save(path, numpy.ascontiguousarray(a)))"
            )));
        }
        let frames =
            match header.shape.len() {
                2 => 1,
                3 => header.shape[0],
                4 if planes => header.shape[0]
                    .checked_mul(header.shape[1])
                    .ok_or_else(|| {
                        BridgeError::InvalidInput(format!("{name}: the planes overflow").into())
                    })?,
                n => {
                    return Err(BridgeError::InvalidInput(format!(
                    "{name}: expected a 2-D frame or a 3-D movie (T, H, W), got {n} dimensions"
                ).into()));
                }
            };
        Ok(NpyFrames {
            header,
            payload,
            name,
            frames,
            next: 0,
        })
    }

    /// The array's shape, as its header declares it.
    pub fn shape(&self) -> &[usize] {
        &self.header.shape
    }

    /// Frames in the file.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The next (at most) `n` frames, decoded under `budget`; `None` at the end.
    pub fn next_chunk(&mut self, n: usize, budget: &Budget) -> Result<Option<Movie>> {
        if self.next >= self.frames {
            return Ok(None);
        }
        let k = n.max(1).min(self.frames - self.next);
        let s = &self.header.shape;
        let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
        let sub = NpyHeader {
            shape: vec![k, h, w],
            ..self.header.clone()
        };
        let (count, nbytes) = sub.sizes(&self.name)?;
        budget.check(
            nbytes as u64,
            &format!(
                "{} (frames {}..{} of shape {:?} of {})",
                self.name,
                self.next,
                self.next + k,
                self.header.shape,
                self.header.dtype.name()
            ),
            "stream smaller chunks (--chunk-frames, --chunk-mb)",
        )?;
        let what = format!("{} (frames {}..{})", self.name, self.next, self.next + k);
        let arr = decode_payload(&sub, count, &mut self.payload, &what)?;
        self.next += k;
        Ok(Some(match arr {
            NpyArray::U8(a) => Movie::U8(to3(a, &what)?),
            NpyArray::U16(a) => Movie::U16(to3(a, &what)?),
            NpyArray::F32(a) => Movie::F32(to3(a, &what)?),
            NpyArray::F64(a) => Movie::F64(to3(a, &what)?),
        }))
    }
}

fn to3<T: Clone>(a: ArrayD<T>, path: &str) -> Result<Array3<T>> {
    let a = match a.ndim() {
        2 => a.insert_axis(ndarray::Axis(0)),
        3 => a,
        n => {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{path}: expected a 2-D frame or a 3-D movie (T, H, W), got {n} dimensions"
                )
                .into(),
            ));
        }
    };
    a.into_dimensionality::<ndarray::Ix3>()
        .map_err(|e| invalid(path, e))
}

/// Read a `.npy` frame (2-D) or movie (3-D, `[T][H][W]`) as a [`Movie`].
pub fn read_movie(path: &Path) -> Result<Movie> {
    read_movie_with_budget(path, &Budget::current())
}

/// [`read_movie`] under an explicit memory budget (tests simulate a small machine with it).
pub fn read_movie_with_budget(path: &Path, budget: &Budget) -> Result<Movie> {
    let name = path.display().to_string();
    Ok(match read_npy_with_budget(path, budget)? {
        NpyArray::U8(a) => Movie::U8(to3(a, &name)?),
        NpyArray::U16(a) => Movie::U16(to3(a, &name)?),
        NpyArray::F32(a) => Movie::F32(to3(a, &name)?),
        NpyArray::F64(a) => Movie::F64(to3(a, &name)?),
    })
}

/// Encode an array as `.npy` version 1.0 bytes (little-endian, C order); used by tests and tools.
pub fn encode_npy(descr: &str, shape: &[usize], payload: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_txt = if shape.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_txt}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_errors() {
        let payload: Vec<u8> = [1u16, 2, 3, 4, 5, 6]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let b = encode_npy("<u2", &[2, 3], &payload);
        let a = parse_npy(&b, "t").unwrap();
        assert_eq!(a.shape(), &[2, 3]);
        // truncated payload
        assert!(matches!(
            parse_npy(&b[..b.len() - 1], "t"),
            Err(BridgeError::ShapeMismatch { .. })
        ));
        // bad magic
        assert!(parse_npy(b"hello world", "t").is_err());
        // header length past the end
        let mut c = b.clone();
        c[8] = 0xff;
        c[9] = 0xff;
        assert!(parse_npy(&c, "t").is_err());
        // unsupported dtype
        let d = encode_npy("<c16", &[1], &[0; 16]);
        assert!(matches!(
            parse_npy(&d, "t"),
            Err(BridgeError::Unsupported(_))
        ));
        // fortran order transposes
        let f = String::from_utf8(b.clone()).unwrap_or_default();
        let _ = f;
        let mut g = encode_npy("<u2", &[2, 3], &payload);
        let pos = g.windows(5).position(|w| w == b"False").unwrap();
        g.splice(pos..pos + 5, b"True ".iter().copied());
        let NpyArray::U16(t) = parse_npy(&g, "t").unwrap() else {
            panic!()
        };
        assert_eq!(t[[1, 0]], 2);
        assert_eq!(t[[0, 1]], 3);
        // empty input
        assert!(parse_npy(&[], "t").is_err());
    }
}
