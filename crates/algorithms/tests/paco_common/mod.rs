//! Shared helpers for the PACO tests: a minimal FITS reader for the fixtures (primary HDU,
//! BITPIX −32/−64/8/16/32, BSCALE/BZERO), the fixture paths and bit-for-bit map equality.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use ndarray::{Array1, Array2, Array3, ArrayD, IxDyn};

/// Two maps equal bit for bit (NaN equals NaN).
pub fn same(a: &Array2<f64>, b: &Array2<f64>) -> bool {
    a.shape() == b.shape()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// `fixtures/paco` (see [`test_support::fixtures::dir`]).
pub fn fixtures() -> PathBuf {
    test_support::fixtures::path("paco")
}

/// Read the primary image of a FITS file as f64 (C order).
pub fn read_fits(name: &str) -> ArrayD<f64> {
    let path = fixtures().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bitpix = 0i64;
    let mut naxis = Vec::new();
    let (mut bscale, mut bzero) = (1.0f64, 0.0f64);
    let mut off = 0;
    'hdr: loop {
        let block = &bytes[off..off + 2880];
        off += 2880;
        for card in block.chunks(80) {
            let card = std::str::from_utf8(card).unwrap();
            let key = card[..8].trim();
            let val = card
                .get(10..)
                .unwrap_or("")
                .split('/')
                .next()
                .unwrap_or("")
                .trim();
            match key {
                "BITPIX" => bitpix = val.parse().unwrap(),
                "BSCALE" => bscale = val.parse().unwrap(),
                "BZERO" => bzero = val.parse().unwrap(),
                "END" => break 'hdr,
                k if k.starts_with("NAXIS") && k.len() > 5 => {
                    naxis.push(val.parse::<usize>().unwrap())
                }
                _ => {}
            }
        }
    }
    let n: usize = naxis.iter().product();
    let bpp = (bitpix.unsigned_abs() / 8) as usize;
    let data = &bytes[off..off + n * bpp];
    let vals: Vec<f64> = data
        .chunks(bpp)
        .map(|c| {
            let raw = match bitpix {
                -32 => f32::from_be_bytes(c.try_into().unwrap()) as f64,
                -64 => f64::from_be_bytes(c.try_into().unwrap()),
                8 => c[0] as f64,
                16 => i16::from_be_bytes(c.try_into().unwrap()) as f64,
                32 => i32::from_be_bytes(c.try_into().unwrap()) as f64,
                _ => panic!("BITPIX {bitpix}"),
            };
            raw * bscale + bzero
        })
        .collect();
    naxis.reverse();
    ArrayD::from_shape_vec(IxDyn(&naxis), vals).unwrap()
}

pub fn cube() -> Array3<f64> {
    read_fits("synth_adi40_64_cube.fits")
        .into_dimensionality()
        .unwrap()
}
pub fn cube_noplanet() -> Array3<f64> {
    read_fits("synth_adi40_64_cube_noplanet.fits")
        .into_dimensionality()
        .unwrap()
}
pub fn angles() -> Array1<f64> {
    let a = read_fits("synth_adi40_64_angles.fits");
    Array1::from_iter(a.iter().copied())
}
pub fn psf() -> Array2<f64> {
    read_fits("synth_adi40_64_psf.fits")
        .into_dimensionality()
        .unwrap()
}
pub fn golden(name: &str) -> Array2<f64> {
    read_fits(&format!("golden/{name}"))
        .into_dimensionality()
        .unwrap()
}

pub const NORM: f64 = 9.540355072844195;

/// Compare against a golden map: NaN mask identical (up to `max_mask_diff` pixels), finite pixels
/// within `rel` (a: relative to |a|; b: relative to max|b| when `scale_by_max`).
/// Returns (max error, number of pixels over tolerance, mask differences).
pub fn compare(
    ours: &Array2<f64>,
    gold: &Array2<f64>,
    scale_by_max: bool,
) -> (f64, usize, usize, f64) {
    let maxabs = gold
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut worst = 0.0f64;
    let mut over = 0usize;
    let mut mask = 0usize;
    let mut errs = Vec::new();
    for (o, g) in ours.iter().zip(gold.iter()) {
        if o.is_finite() != g.is_finite() {
            mask += 1;
            continue;
        }
        if !g.is_finite() {
            continue;
        }
        let e = if scale_by_max {
            (o - g).abs() / maxabs
        } else {
            (o - g).abs() / g.abs()
        };
        errs.push(e);
        if e > 1e-9 {
            over += 1;
        }
    }
    errs.sort_by(f64::total_cmp);
    let med = errs.get(errs.len() / 2).copied().unwrap_or(0.0);
    for e in &errs {
        worst = worst.max(*e);
    }
    (worst, over, mask, med)
}
