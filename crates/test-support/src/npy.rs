//! A minimal `.npy` reader for fixtures: little-endian, C order, format versions 1 to 3.
//! Malformed files panic (this is test support); the product's reader with its checks is
//! `arraybridge::io::npy`.
//!
//! ```
//! let mut file = b"\x93NUMPY\x01\x00".to_vec();
//! let header = "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }";
//! file.extend_from_slice(&(header.len() as u16).to_le_bytes());
//! file.extend_from_slice(header.as_bytes());
//! file.extend_from_slice(&[1, 0, 2, 0]);
//! let npy = test_support::npy::Npy::parse(&file, "example");
//! assert_eq!(npy.shape, vec![2]);
//! assert_eq!(npy.u16s(), vec![1, 2]);
//! ```

use std::path::Path;

/// A loaded `.npy` (little-endian, C order).
#[derive(Debug, Clone, PartialEq)]
pub struct Npy {
    /// The dtype descriptor (`<f8`, `<f4`, `<u2`...).
    pub descr: String,
    /// The shape.
    pub shape: Vec<usize>,
    /// The payload bytes.
    pub data: Vec<u8>,
}

impl Npy {
    /// Parse a whole `.npy` file; `name` is for messages.
    pub fn parse(bytes: &[u8], name: &str) -> Npy {
        assert_eq!(&bytes[..6], b"\x93NUMPY", "{name}: not a .npy file");
        let (hlen, start) = if bytes[6] == 1 {
            (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
        } else {
            (
                u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
                12,
            )
        };
        let header = std::str::from_utf8(&bytes[start..start + hlen]).unwrap();
        let descr = header
            .split("'descr':")
            .nth(1)
            .unwrap()
            .split('\'')
            .nth(1)
            .unwrap()
            .to_string();
        assert!(header.contains("'fortran_order': False"));
        let shape_txt = header.split("'shape':").nth(1).unwrap();
        let shape_txt = &shape_txt[shape_txt.find('(').unwrap() + 1..shape_txt.find(')').unwrap()];
        let shape = shape_txt
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().unwrap())
            .collect();
        Npy {
            descr,
            shape,
            data: bytes[start + hlen..].to_vec(),
        }
    }

    /// The elements as f64 (the descriptor must be `<f8`).
    pub fn f64s(&self) -> Vec<f64> {
        assert_eq!(self.descr, "<f8");
        self.data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// The elements as f32 (the descriptor must be `<f4`).
    pub fn f32s(&self) -> Vec<f32> {
        assert_eq!(self.descr, "<f4");
        self.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// The elements as u16 (the descriptor must be `<u2`).
    pub fn u16s(&self) -> Vec<u16> {
        assert_eq!(self.descr, "<u2");
        self.data
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

/// Read a `.npy` file; panics naming `path` when it cannot be read.
pub fn read(path: &Path) -> Npy {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Npy::parse(&bytes, &path.display().to_string())
}
