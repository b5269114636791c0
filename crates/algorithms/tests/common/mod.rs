//! Shared helpers of the detection tests: fixture paths, a minimal `.npy` reader and CSV tables.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;

/// `fixtures/detect/<rel>` (see [`test_support::fixtures::dir`]).
pub fn fixture(rel: &str) -> PathBuf {
    test_support::fixtures::path("detect").join(rel)
}

/// A loaded `.npy` (little-endian, C order): the reader of `test_support::npy`.
pub use test_support::npy::Npy;

/// `fixtures/detect/<rel>` as a loaded `.npy`.
pub fn load_npy(rel: &str) -> Npy {
    let bytes = std::fs::read(fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    Npy::parse(&bytes, rel)
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

/// A fixture or generated frame of any supported pixel type.
pub enum Frame {
    F32(ndarray::Array2<f32>),
    F64(ndarray::Array2<f64>),
    U16(ndarray::Array2<u16>),
    U8(ndarray::Array2<u8>),
}

impl Frame {
    /// `blob_log/<name>.npy` (u16 when the name ends in `u16`, f32 otherwise).
    pub fn load(name: &str) -> Frame {
        let n = load_npy(&format!("blob_log/{name}.npy"));
        let dim = (n.shape[0], n.shape[1]);
        if name.ends_with("u16") {
            Frame::U16(ndarray::Array2::from_shape_vec(dim, n.u16s()).unwrap())
        } else {
            Frame::F32(ndarray::Array2::from_shape_vec(dim, n.f32s()).unwrap())
        }
    }

    pub fn view(&self) -> algorithms::detect::FrameView<'_> {
        use algorithms::detect::FrameView;
        match self {
            Frame::F32(a) => FrameView::F32(a.view()),
            Frame::F64(a) => FrameView::F64(a.view()),
            Frame::U16(a) => FrameView::U16(a.view()),
            Frame::U8(a) => FrameView::U8(a.view()),
        }
    }
}

/// The fixture parameter sets (fixtures README §2.2) of `frame`.
pub fn params(frame: &str, set: &str) -> algorithms::detect::blob_log::BlobLogParams {
    let mut p = algorithms::detect::blob_log::BlobLogParams {
        min_sigma: 1.0,
        max_sigma: 3.0,
        num_sigma: 10,
        threshold: None,
        threshold_rel: Some(0.2),
        overlap: 0.5,
        log_scale: false,
        exclude_border: (0, 0),
        prescale: algorithms::detect::Prescale::Legacy,
    };
    match set {
        "default_rel" => {}
        "abs" => {
            p.threshold_rel = None;
            p.threshold = Some(match frame {
                "hisnr_f32" => 0.05,
                "lowsnr_f32" => 0.1,
                "hisnr_u16" => 0.00012,
                "overlap_f32" => 0.05,
                _ => unreachable!(),
            });
        }
        "logscale" => {
            p.max_sigma = 4.0;
            p.num_sigma = 7;
            p.log_scale = true;
        }
        "border5" => p.exclude_border = (5, 5),
        "overlap0" => p.overlap = 0.0,
        "overlap1" => p.overlap = 1.0,
        _ => unreachable!(),
    }
    p
}
