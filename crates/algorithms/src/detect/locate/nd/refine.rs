//! Refinement and characterisation of the n-D candidates on trackpy's elliptical mask, as
//! trackpy's Python engine (`refine.center_of_mass._refine`) computes them, and the background
//! noise of the static error (`uncertainty.measure_noise`).

use super::Kind;
use crate::detect::filters::numpy_sum;

/// trackpy's `binary_mask(radius, ndim)` and the tables its refinement reads.
pub(super) struct Mask {
    /// Radius per axis.
    pub(super) radius: Vec<usize>,
    /// Side of the mask's box per axis (`2r + 1`).
    pub(super) side: Vec<usize>,
    /// Whether each pixel of the box (raster order) is in the mask.
    pub(super) inside: Vec<bool>,
    /// The multi-indices (`0..=2r` per axis) of the mask's pixels, raster order.
    pub(super) points: Vec<Vec<usize>>,
    /// The multi-index of every pixel of the box, raster order.
    pub(super) cells: Vec<Vec<usize>>,
}

impl Mask {
    /// `Σ ((i − r)/r)² ≤ 1` over the axes, summed in axis order (an axis of radius 0 gives
    /// 0/0 = NaN and an empty mask, as in trackpy).
    pub(super) fn new(radius: &[usize]) -> Mask {
        let side: Vec<usize> = radius.iter().map(|r| 2 * r + 1).collect();
        let total: usize = side.iter().product();
        let mut inside = Vec::with_capacity(total);
        let mut points = Vec::new();
        let cells: Vec<Vec<usize>> = (0..total).map(|k| unravel(k, &side)).collect();
        for idx in cells.iter().cloned() {
            let mut s = 0.0f64;
            for (&i, &r) in idx.iter().zip(radius) {
                let c = (i as f64 - r as f64) / r as f64;
                s += c * c;
            }
            let ok = s <= 1.0;
            inside.push(ok);
            if ok {
                points.push(idx);
            }
        }
        Mask {
            radius: radius.to_vec(),
            side,
            inside,
            points,
            cells,
        }
    }

    /// trackpy's `_root_sum_x_squared`: `√Σ (i − r)²` over the mask, per axis.
    pub(super) fn root_sum_x2(&self) -> Vec<f64> {
        (0..self.radius.len())
            .map(|a| {
                let r = self.radius[a] as f64;
                self.points
                    .iter()
                    .map(|p| (p[a] as f64 - r).powi(2))
                    .sum::<f64>()
                    .sqrt()
            })
            .collect()
    }
}

/// The multi-index of raster position `k` in a box of `shape`.
pub(super) fn unravel(mut k: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0usize; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = k % shape[a];
        k /= shape[a];
    }
    idx
}

/// The image, its raw pixels and their geometry, as the refinement reads them.
pub(super) struct Images<'a> {
    /// The rescaled integer image.
    pub(super) img: &'a [u32],
    /// The raw pixels (inverted if asked), as f64.
    pub(super) raw: &'a [f64],
    /// The image's shape.
    pub(super) shape: &'a [usize],
    /// Row-major strides of `shape`.
    pub(super) strides: Vec<usize>,
    /// The raw pixels' type.
    pub(super) kind: Kind,
}

/// One refined candidate: position, mass, size(s), ecc, signal, raw mass (rescaled units).
pub(super) struct Refined {
    /// Centroid per axis.
    pub(super) pos: Vec<f64>,
    /// Sum of the masked rescaled image.
    pub(super) mass: f64,
    /// Radius of gyration (one, or one per axis when anisotropic).
    pub(super) size: Vec<f64>,
    /// Eccentricity (2-D only, else NaN).
    pub(super) ecc: f64,
    /// Brightest masked pixel.
    pub(super) signal: f64,
    /// Sum of the masked raw pixels.
    pub(super) raw_mass: f64,
}

/// The offsets (in the image) of the pixels of the mask's box at `origin`, raster order.
fn box_pixels(im: &Images<'_>, m: &Mask, origin: &[usize]) -> Vec<usize> {
    m.cells
        .iter()
        .map(|idx| {
            idx.iter()
                .zip(origin)
                .zip(&im.strides)
                .map(|((&i, &o), &s)| (i + o) * s)
                .sum()
        })
        .collect()
}

/// Iterated centre of mass from candidate `c0` (trackpy's `_refine`), then the
/// characterisation of the last neighbourhood.
pub(super) fn refine_one(
    im: &Images<'_>,
    m: &Mask,
    c0: &[usize],
    max_iterations: usize,
    characterize: bool,
    isotropic: bool,
) -> Refined {
    let nd = c0.len();
    let mut coord: Vec<usize> = c0.to_vec();
    let mut cm_i = vec![0.0f64; nd];
    let mut pixels = Vec::new();
    let mut mass = 0.0f64;
    for _ in 0..max_iterations.max(1) {
        let origin: Vec<usize> = coord.iter().zip(&m.radius).map(|(c, r)| c - r).collect();
        pixels = box_pixels(im, m, &origin);
        let mut sums = vec![0.0f64; nd];
        let mut total = 0u64;
        for (k, &off) in pixels.iter().enumerate() {
            if !m.inside[k] {
                continue;
            }
            let px = im.img[off];
            total += u64::from(px);
            for (s, &i) in sums.iter_mut().zip(&m.cells[k]) {
                *s += f64::from(px) * i as f64;
            }
        }
        mass = total as f64;
        let mut converged = true;
        let mut off_center = vec![0.0f64; nd];
        for a in 0..nd {
            let r = m.radius[a] as f64;
            let cm_n = if total == 0 { r } else { sums[a] / mass };
            cm_i[a] = (cm_n - r) + coord[a] as f64;
            off_center[a] = cm_n - r;
            converged &= off_center[a].abs() < 0.6;
        }
        if converged {
            break;
        }
        for a in 0..nd {
            let r = m.radius[a];
            let mut c = coord[a] as isize;
            if off_center[a] > 0.6 {
                c += 1;
            } else if off_center[a] < -0.6 {
                c -= 1;
            }
            let upper = im.shape[a] as isize - 1 - r as isize;
            coord[a] = c.max(r as isize).min(upper.max(r as isize)) as usize;
        }
    }
    let mut out = Refined {
        pos: cm_i,
        mass,
        size: Vec::new(),
        ecc: f64::NAN,
        signal: f64::NAN,
        raw_mass: f64::NAN,
    };
    if characterize {
        characterize_one(im, m, &pixels, isotropic, &mut out);
    }
    out
}

/// Size(s), eccentricity (2-D), signal and raw mass of the neighbourhood at `pixels`.
fn characterize_one(
    im: &Images<'_>,
    m: &Mask,
    pixels: &[usize],
    isotropic: bool,
    out: &mut Refined,
) {
    let nd = m.radius.len();
    let mut r2 = 0.0f64;
    let mut x2 = vec![0.0f64; nd];
    let mut signal = 0u32;
    for (k, &off) in pixels.iter().enumerate() {
        if !m.inside[k] {
            continue;
        }
        let px = im.img[off];
        signal = signal.max(px);
        let idx = &m.cells[k];
        let mut s = 0.0f64;
        for a in 0..nd {
            let d = idx[a] as f64 - m.radius[a] as f64;
            x2[a] += d * d * f64::from(px);
            s += d * d;
        }
        r2 += s * f64::from(px);
    }
    out.size = if isotropic {
        vec![(r2 / out.mass).sqrt()]
    } else {
        x2.iter()
            .map(|&v| ((nd as f64 * v) / out.mass).sqrt())
            .collect()
    };
    out.signal = f64::from(signal);
    if nd == 2 {
        out.ecc = ecc_2d(im, m, pixels, out.mass);
    }
    out.raw_mass = raw_sum(im, m, pixels);
}

/// trackpy's 2-D eccentricity: `√(Σ px·cos 2θ)² + (Σ px·sin 2θ)²) / (mass − centre + 1e-6)`,
/// the sums NumPy's pairwise sums over the mask's box.
fn ecc_2d(im: &Images<'_>, m: &Mask, pixels: &[usize], mass: f64) -> f64 {
    let (ry, rx) = (m.radius[0] as f64, m.radius[1] as f64);
    let mut c = Vec::with_capacity(pixels.len());
    let mut s = Vec::with_capacity(pixels.len());
    for (k, &off) in pixels.iter().enumerate() {
        let px = if m.inside[k] {
            f64::from(im.img[off])
        } else {
            0.0
        };
        let (i, j) = (k / m.side[1], k % m.side[1]);
        let th = (i as f64 - ry).atan2(j as f64 - rx);
        c.push(px * (2.0 * th).cos());
        s.push(px * (2.0 * th).sin());
    }
    let (e1, e2) = (numpy_sum(&c), numpy_sum(&s));
    let centre = f64::from(im.img[pixels[pixels.len() / 2]]);
    (e1 * e1 + e2 * e2).sqrt() / (mass - centre + 1e-6)
}

/// The sum of the masked raw pixels over the mask's box as NumPy forms it: exact for integer
/// pixels, pairwise in the pixels' float type otherwise.
fn raw_sum(im: &Images<'_>, m: &Mask, pixels: &[usize]) -> f64 {
    let vals: Vec<f64> = pixels
        .iter()
        .enumerate()
        .map(|(k, &off)| if m.inside[k] { im.raw[off] } else { 0.0 })
        .collect();
    match im.kind {
        Kind::F32 => f64::from(numpy_sum_f32(&vals)),
        _ => numpy_sum(&vals),
    }
}

/// NumPy's pairwise sum of float32 values (given as f64), in float32.
pub(super) fn numpy_sum_f32(a: &[f64]) -> f32 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0f32;
        for &v in a {
            res += v as f32;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f32; 8];
        for (d, &v) in r.iter_mut().zip(&a[..8]) {
            *d = v as f32;
        }
        let mut i = 8;
        while i < n - (n % 8) {
            for k in 0..8 {
                r[k] += a[i + k] as f32;
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        while i < n {
            res += a[i] as f32;
            i += 1;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        numpy_sum_f32(&a[..n2]) + numpy_sum_f32(&a[n2..])
    }
}
