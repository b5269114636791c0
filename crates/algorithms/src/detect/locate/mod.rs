//! `trackpy.locate` (trackpy 0.7, Crocker–Grier feature finding), spec §2.
//!
//! Chain: optional inversion → bandpass (Gaussian lowpass with zero padding minus a boxcar with
//! edge replication computed in the input dtype) → rescale to the integer gamut (truncation) →
//! grey-dilation local maxima above a percentile of the non-zero pixels, outside the margin →
//! iterated centre-of-mass refinement on the circular mask → characterisation (mass, size, ecc,
//! signal, raw_mass) → duplicate removal within `separation` → `mass > minmass` → static error.
//!
//! The settings are in `params.rs`, the preprocessing (inversion, bandpass, rescaling) in
//! `bandpass.rs`, the local maxima in `maxima.rs`, the refinement, characterisation and noise
//! in `characterize.rs`; this file chains them ([`locate`]) and removes duplicates.

mod bandpass;
mod characterize;
mod maxima;
mod params;

use bridge_core::Result;

use super::FrameView;
use bandpass::prepare;
use characterize::{mask_geometry, mask_offsets, measure_noise, refine_one};
use maxima::{dilate_rows, local_maxima, percentile_nonzero};

pub use params::LocateParams;

/// One located feature (spec §2.7 columns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feature {
    /// Row of the centroid.
    pub y: f64,
    /// Column of the centroid.
    pub x: f64,
    /// Integrated brightness of the bandpassed image (original units).
    pub mass: f64,
    /// Radius of gyration.
    pub size: f64,
    /// Eccentricity (0 = circular).
    pub ecc: f64,
    /// Maximum bandpassed value in the mask (original units).
    pub signal: f64,
    /// Sum of the raw pixels in the mask.
    pub raw_mass: f64,
    /// Static localisation error (Savin & Doyle).
    pub ep: f64,
}

/// `trackpy.locate` on one 2-D frame. Rows follow the raster order of the maxima (or ascending
/// mass with `topn`).
pub fn locate(frame: FrameView<'_>, p: &LocateParams) -> Result<Vec<Feature>> {
    p.validate()?;
    frame.validate()?;
    let (h, w) = frame.dim();
    let d = p.diameter;
    let r = d / 2;
    let sep = p.separation.unwrap_or((d + 1) as f64);
    let sm = p.smoothing_size.unwrap_or(d);
    let margin = r
        .max(((sep / 2.0).floor() as isize - 1).max(0) as usize)
        .max(sm / 2);
    if h <= 2 * margin || w <= 2 * margin || h < d || w < d {
        return Ok(Vec::new());
    }
    let prep = prepare(&frame, p);
    let img = &prep.img;

    let mask_v = mask_offsets(r);
    let mask = mask_v.as_slice();
    // the background noise only needs the prepared image: measure it on a second worker
    let (noise, feats) = rayon::join(
        || {
            p.characterize
                .then(|| measure_noise(img, &prep.raw, h, w, r, mask))
        },
        || {
            // local maxima
            let box_size = (2.0 * sep / std::f64::consts::SQRT_2) as usize;
            let (thr, rows) = rayon::join(
                || percentile_nonzero(img, p.percentile),
                || dilate_rows(img, h, w, box_size.max(1)),
            );
            let Some(thr) = thr else {
                return Vec::new();
            };
            let maxima = local_maxima(img, &rows, h, w, box_size.max(1), margin, thr);

            // refinement
            let geo = mask_geometry(r, mask);
            let mut feats: Vec<[f64; 7]> = maxima
                .iter()
                .map(|&c| refine_one(img, &prep.raw, h, w, r, mask, &geo, c, p.max_iterations))
                .collect();

            // duplicates: all pairs with ‖Δ/sep‖ ≤ 1 − 1e-7, decided at once
            if sep > 0.0 && feats.len() > 1 {
                let pos: Vec<(f64, f64)> = feats.iter().map(|f| (f[0] / sep, f[1] / sep)).collect();
                let pairs = super::blob_log::pairs_within(&pos, 1.0 - 1e-7);
                let mut drop = vec![false; feats.len()];
                for (i, j) in pairs {
                    let (mi, mj) = (feats[i][2], feats[j][2]);
                    let k = if mi > mj {
                        j
                    } else if mi < mj {
                        i
                    } else if pos[i].0 + pos[i].1 > pos[j].0 + pos[j].1 {
                        j
                    } else {
                        i
                    };
                    drop[k] = true;
                }
                feats = feats
                    .into_iter()
                    .zip(drop)
                    .filter(|(_, d)| !d)
                    .map(|(f, _)| f)
                    .collect();
            }
            feats
        },
    );

    let inv = 1.0 / prep.scale;
    let mut out: Vec<Feature> = feats
        .iter()
        .map(|f| Feature {
            y: f[0],
            x: f[1],
            mass: f[2] * inv,
            size: f[3],
            ecc: f[4],
            signal: f[5] * inv,
            raw_mass: f[6],
            ep: f64::NAN,
        })
        .filter(|f| f.mass > p.minmass)
        .filter(|f| p.maxsize.is_none_or(|m| f.size < m))
        .collect();
    if let Some(n) = p.topn
        && out.len() > n
    {
        out.sort_by(|a, b| {
            a.mass
                .partial_cmp(&b.mass)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        out.drain(..out.len() - n);
    }

    if p.characterize && !out.is_empty() {
        let (black, noise) = noise.unwrap_or((f64::NAN, f64::NAN));
        let npx = mask.len() as f64;
        let moment = mask
            .iter()
            .map(|&(i, _)| ((i as f64) - r as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        for f in &mut out {
            let m = f.raw_mass - npx * black;
            f.ep = noise / m * p.noise_size * moment;
        }
    }
    Ok(out)
}
