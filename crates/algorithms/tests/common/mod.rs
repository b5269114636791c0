//! Shared helpers of the detection tests: fixture paths, a minimal `.npy` reader and CSV tables.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;

/// `shared/fixtures/detect/<rel>`.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/detect"
    ))
    .join(rel)
}

/// A loaded `.npy` (little-endian, C order).
pub struct Npy {
    pub descr: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Npy {
    pub fn f64s(&self) -> Vec<f64> {
        assert_eq!(self.descr, "<f8");
        self.data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    pub fn f32s(&self) -> Vec<f32> {
        assert_eq!(self.descr, "<f4");
        self.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    pub fn u16s(&self) -> Vec<u16> {
        assert_eq!(self.descr, "<u2");
        self.data
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

pub fn load_npy(rel: &str) -> Npy {
    let bytes = std::fs::read(fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert_eq!(&bytes[..6], b"\x93NUMPY");
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

/// A CSV table of strings with a header.
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn col(&self, name: &str) -> usize {
        self.header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    }
    pub fn f64col(&self, name: &str) -> Vec<f64> {
        let c = self.col(name);
        self.rows.iter().map(|r| r[c].parse().unwrap()).collect()
    }
    pub fn index(&self) -> HashMap<String, usize> {
        self.header
            .iter()
            .enumerate()
            .map(|(i, h)| (h.clone(), i))
            .collect()
    }
}

pub fn load_csv(rel: &str) -> Table {
    let text = std::fs::read_to_string(fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut lines = text.lines().filter(|l| !l.is_empty());
    let header = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    Table { header, rows }
}
