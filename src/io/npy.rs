//! A small, defensive reader for NumPy `.npy` files (format versions 1.0, 2.0 and 3.0).
//!
//! Checks the magic string, the version, the header length and its dictionary (`descr`,
//! `fortran_order`, `shape`), the dtype, and that the payload holds exactly
//! `prod(shape) · itemsize` bytes. Every problem is a typed [`BridgeError`]; nothing panics.
//! Supported dtypes: `u1`, `u2`, `f4`, `f8` (little- or big-endian); Fortran-ordered arrays are
//! transposed to C order.

use std::path::Path;

use algorithms::detect::Movie;
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
    BridgeError::InvalidInput(format!("{path}: not a valid .npy file: {msg}"))
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
    let (order, code) = descr.split_at(descr.len().min(1));
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

/// Decode a whole `.npy` byte buffer.
pub fn parse_npy(bytes: &[u8], path: &str) -> Result<NpyArray> {
    let h = parse_header(bytes, path)?;
    let count = h
        .shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| invalid(path, "shape overflows"))?;
    let nbytes = count
        .checked_mul(h.dtype.size())
        .ok_or_else(|| invalid(path, "size overflows"))?;
    let payload = &bytes[h.data_offset..];
    if payload.len() != nbytes {
        return Err(BridgeError::shape_mismatch(
            format!(
                "{nbytes} data bytes for shape {:?} of {:?}",
                h.shape, h.dtype
            ),
            format!("{} bytes", payload.len()),
            path.to_string(),
        ));
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
        NpyDType::U8 => NpyArray::U8(build(&read_shape, payload.to_vec(), f, path)?),
        NpyDType::U16 => {
            let v = payload
                .chunks_exact(2)
                .map(|c| {
                    if be {
                        u16::from_be_bytes([c[0], c[1]])
                    } else {
                        u16::from_le_bytes([c[0], c[1]])
                    }
                })
                .collect();
            NpyArray::U16(build(&read_shape, v, f, path)?)
        }
        NpyDType::F32 => {
            let v = payload
                .chunks_exact(4)
                .map(|c| {
                    let b = [c[0], c[1], c[2], c[3]];
                    if be {
                        f32::from_be_bytes(b)
                    } else {
                        f32::from_le_bytes(b)
                    }
                })
                .collect();
            NpyArray::F32(build(&read_shape, v, f, path)?)
        }
        NpyDType::F64 => {
            let v = payload
                .chunks_exact(8)
                .map(|c| {
                    let b = [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
                    if be {
                        f64::from_be_bytes(b)
                    } else {
                        f64::from_le_bytes(b)
                    }
                })
                .collect();
            NpyArray::F64(build(&read_shape, v, f, path)?)
        }
    })
}

/// Read a `.npy` file.
pub fn read_npy(path: &Path) -> Result<NpyArray> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    parse_npy(&bytes, &name)
}

fn to3<T: Clone>(a: ArrayD<T>, path: &str) -> Result<Array3<T>> {
    let a = match a.ndim() {
        2 => a.insert_axis(ndarray::Axis(0)),
        3 => a,
        n => {
            return Err(BridgeError::InvalidInput(format!(
                "{path}: expected a 2-D frame or a 3-D movie (T, H, W), got {n} dimensions"
            )));
        }
    };
    a.into_dimensionality::<ndarray::Ix3>()
        .map_err(|e| invalid(path, e))
}

/// Read a `.npy` frame (2-D) or movie (3-D, `[T][H][W]`) as a [`Movie`].
pub fn read_movie(path: &Path) -> Result<Movie> {
    let name = path.display().to_string();
    Ok(match read_npy(path)? {
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
