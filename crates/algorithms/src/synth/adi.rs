//! Synthetic angular-differential-imaging (ADI) sequences for PACO: a cube of frames, the
//! derotation angle of each frame and an off-axis PSF.
//!
//! * [`synthetic_adi_with_planet`]: a coronagraphic sequence with one injected planet and its
//!   truth ([`AdiWithPlanet`]), the PACO input of `arraybridge demo`.
//! * [`synthetic_adi`]: the simple cube PACO is timed on ([`crate::paco::bench`], the criterion
//!   bench, `arraybridge bench paco`).
//!
//! Both are deterministic for a seed. Frame `ℓ` shows the derotated position `(r, θ0)` at
//! `(r, θ0 − angle_ℓ)` about the centre, PACO's convention.

use ndarray::{Array1, Array2, Array3};

use super::{SplitMix, pixel_weight};

/// What [`synthetic_adi_with_planet`] generates: optics, planet and field rotation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanetAdiParams {
    /// PSF full width at half maximum (px).
    pub fwhm: f64,
    /// Planet separation from the star (px).
    pub separation: f64,
    /// Planet position angle (degrees counter-clockwise from +x in array coordinates, in the
    /// derotated frame).
    pub angle_deg: f64,
    /// Planet contrast (planet / star peak).
    pub contrast: f64,
    /// Peak of the unocculted star in the PSF frame (counts).
    pub star_peak: f64,
    /// Total field rotation over the sequence (degrees).
    pub rotation_deg: f64,
}

impl Default for PlanetAdiParams {
    /// The scenario of `arraybridge demo`: FWHM 4 px, a planet at 18 px and 30° of contrast
    /// 6e-3, a star peak of 20 000 counts, 80° of field rotation.
    fn default() -> Self {
        PlanetAdiParams {
            fwhm: 4.0,
            separation: 18.0,
            angle_deg: 30.0,
            contrast: 6e-3,
            star_peak: 20_000.0,
            rotation_deg: 80.0,
        }
    }
}

/// The injected planet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanetTruth {
    /// Row in the derotated frame.
    pub y: f64,
    /// Column in the derotated frame.
    pub x: f64,
    /// Separation from the star (px).
    pub separation: f64,
    /// Position angle (degrees, derotated frame).
    pub angle_deg: f64,
    /// Contrast (planet / star peak).
    pub contrast: f64,
}

/// A generated ADI sequence with one planet.
#[derive(Debug, Clone)]
pub struct AdiWithPlanet {
    /// Frames `(T, N, N)`.
    pub cube: Array3<f64>,
    /// Derotation angle of each frame (degrees).
    pub angles: Array1<f64>,
    /// The off-axis PSF (21 × 21, peak at the centre).
    pub psf: Array2<f64>,
    /// Where the planet is, and how bright.
    pub planet: PlanetTruth,
    /// The star (row, column).
    pub centre: (f64, f64),
}

/// Separable Gaussian smoothing of an `n × n` field (zero outside).
fn blur(field: &[f64], n: usize, sigma: f64) -> Vec<f64> {
    let r = (3.0 * sigma).ceil() as isize;
    let k: Vec<f64> = (-r..=r)
        .map(|d| (-(d * d) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let pass = |src: &[f64], along_rows: bool| {
        let mut dst = vec![0.0; n * n];
        for y in 0..n {
            for x in 0..n {
                let mut acc = 0.0;
                for (i, kv) in k.iter().enumerate() {
                    let o = i as isize - r;
                    let (yy, xx) = if along_rows {
                        (y as isize, x as isize + o)
                    } else {
                        (y as isize + o, x as isize)
                    };
                    if yy >= 0 && xx >= 0 && (yy as usize) < n && (xx as usize) < n {
                        acc += kv * src[yy as usize * n + xx as usize];
                    }
                }
                dst[y * n + x] = acc;
            }
        }
        dst
    };
    pass(&pass(field, true), false)
}

/// A unit-mean-intensity complex speckle field (`re`, `im`), grains of about the PSF size.
fn speckle_field(rng: &mut SplitMix, n: usize, sigma: f64) -> (Vec<f64>, Vec<f64>) {
    let mut white = || (0..n * n).map(|_| rng.normal()).collect::<Vec<f64>>();
    let (re, im) = (blur(&white(), n, sigma), blur(&white(), n, sigma));
    let mean = re.iter().zip(&im).map(|(a, b)| a * a + b * b).sum::<f64>() / (n * n) as f64;
    let k = 1.0 / mean.max(1e-300).sqrt();
    (
        re.iter().map(|v| v * k).collect(),
        im.iter().map(|v| v * k).collect(),
    )
}

/// Add a pixel-integrated Gaussian of peak `peak` (of the continuous profile) at `(cy, cx)`.
fn add_gaussian(img: &mut [f64], n: usize, cy: f64, cx: f64, sigma: f64, peak: f64) {
    let total = peak * 2.0 * std::f64::consts::PI * sigma * sigma;
    let r = (5.0 * sigma).ceil() as isize;
    let (iy, ix) = (cy.round() as isize, cx.round() as isize);
    for y in (iy - r).max(0)..=(iy + r).min(n as isize - 1) {
        let wy = pixel_weight(y as f64, cy, sigma);
        for x in (ix - r).max(0)..=(ix + r).min(n as isize - 1) {
            img[y as usize * n + x as usize] += total * wy * pixel_weight(x as f64, cx, sigma);
        }
    }
}

/// Where a source at separation `sep` and position angle `pa` (degrees, derotated frame) about
/// `centre` appears in a raw frame of derotation angle `angle` (PACO's convention).
fn frame_position(centre: (f64, f64), sep: f64, pa: f64, angle: f64) -> (f64, f64) {
    let th = (pa - angle).to_radians();
    (centre.0 + sep * th.sin(), centre.1 + sep * th.cos())
}

/// A coronagraphic ADI sequence of `t` frames of `n × n`: a stellar halo and speckles fixed on
/// the detector (a static speckle field plus a slowly evolving one, 35 % in amplitude), one
/// planet whose position turns with the parallactic angles, Poisson photon noise and 3 counts of
/// read noise. The angles follow a meridian transit (faster rotation mid-sequence),
/// [`PlanetAdiParams::rotation_deg`] in all. The star is at `(n/2, n/2)`; the PSF is a 21 × 21
/// pixel-integrated Gaussian of the given FWHM and the star's peak. Deterministic for a seed
/// (one [`SplitMix`] stream).
pub fn synthetic_adi_with_planet(
    t: usize,
    n: usize,
    seed: u64,
    params: &PlanetAdiParams,
) -> AdiWithPlanet {
    let mut rng = SplitMix::new(seed ^ 0xAD1_C0BE);
    let fwhm = params.fwhm;
    let star_peak = params.star_peak;
    let sigma = fwhm / (8.0 * std::f64::consts::LN_2).sqrt();
    let c = (n / 2) as f64;
    let half = params.rotation_deg / 2.0;
    let angles = Array1::from_shape_fn(t, |i| {
        let u = i as f64 / (t.max(2) - 1) as f64 - 0.5;
        half * (2.4 * u).tanh() / 1.2f64.tanh()
    });
    let (sre, sim) = speckle_field(&mut rng, n, sigma);
    let (are, aim) = speckle_field(&mut rng, n, sigma);
    let (bre, bim) = speckle_field(&mut rng, n, sigma);
    // Halo envelope: bright near the star, coronagraph mask inside ~1 FWHM.
    let envelope: Vec<f64> = (0..n * n)
        .map(|i| {
            let r = ((i / n) as f64 - c).hypot((i % n) as f64 - c);
            let mask = 1.0 - (-(r / fwhm).powi(2)).exp();
            star_peak * 0.04 * mask / (1.0 + (r / 6.0).powi(2)).powf(1.2)
        })
        .collect();
    let (sep, pa, contrast) = (params.separation, params.angle_deg, params.contrast);
    let planet = PlanetTruth {
        y: c + sep * pa.to_radians().sin(),
        x: c + sep * pa.to_radians().cos(),
        separation: sep,
        angle_deg: pa,
        contrast,
    };
    let mut data = vec![0.0; t * n * n];
    for (f, frame) in data.chunks_mut(n * n).enumerate() {
        let phase = std::f64::consts::PI * f as f64 / t as f64;
        let (ca, sa) = (0.35 * phase.cos(), 0.35 * phase.sin());
        let mut img: Vec<f64> = (0..n * n)
            .map(|i| {
                let re = sre[i] + ca * are[i] + sa * bre[i];
                let im = sim[i] + ca * aim[i] + sa * bim[i];
                envelope[i] * (re * re + im * im) / (1.0 + 0.35 * 0.35) + 0.3 * envelope[i] + 20.0
            })
            .collect();
        let (py, px) = frame_position((c, c), sep, pa, angles[f]);
        add_gaussian(&mut img, n, py, px, sigma, contrast * star_peak);
        for (o, v) in frame.iter_mut().zip(img) {
            *o = rng.poisson(v) + 3.0 * rng.normal();
        }
    }
    let cube = Array3::from_shape_vec((t, n, n), data).unwrap_or_else(|_| Array3::zeros((t, n, n)));
    let psf_n = 21;
    let mut psf = vec![0.0; psf_n * psf_n];
    let pc = (psf_n / 2) as f64;
    add_gaussian(&mut psf, psf_n, pc, pc, sigma, star_peak);
    let psf = Array2::from_shape_vec((psf_n, psf_n), psf)
        .unwrap_or_else(|_| Array2::zeros((psf_n, psf_n)));
    AdiWithPlanet {
        cube,
        angles,
        psf,
        planet,
        centre: (c, c),
    }
}

/// A synthetic ADI cube (`t` frames of `n`×`n`) for timing PACO: a quasi-static speckle field
/// falling off with the distance to the star, slowly evolving speckles and white noise; angles
/// 0…60°; a 21×21 Gaussian PSF of nominal FWHM 4 px. Deterministic for a given `seed`.
/// Its random numbers come from the one generator, [`SplitMix`] (until 2026-11-23 this cube
/// drew from its own xorshift64* stream: same distributions, other values for a seed, so the
/// timings in `docs/perf.md` taken before are on a statistically identical cube).
pub fn synthetic_adi(t: usize, n: usize, seed: u64) -> (Array3<f64>, Array1<f64>, Array2<f64>) {
    let mut rng = SplitMix::new(seed);
    let stat = Array2::from_shape_fn((n, n), |_| rng.uniform());
    let c = (n / 2) as f64;
    let cube = Array3::from_shape_fn((t, n, n), |(f, y, x)| {
        let r = ((y as f64 - c).powi(2) + (x as f64 - c).powi(2)).sqrt() + 1.0;
        100.0 / r * stat[[y, x]] * (1.0 + 0.1 * (f as f64 * 0.1 + x as f64).sin()) + rng.uniform()
    });
    let angles = Array1::from_shape_fn(t, |i| 60.0 * i as f64 / (t.max(2) - 1) as f64);
    let sigma = 4.0 / (8.0f64.ln() * 2.0).sqrt();
    let psf = Array2::from_shape_fn((21, 21), |(y, x)| {
        (-((y as f64 - 10.0).powi(2) + (x as f64 - 10.0).powi(2)) / (2.0 * sigma * sigma)).exp()
    });
    (cube, angles, psf)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::paco::{EdgeRule, Geometry, Rounding};

    #[test]
    fn planet_follows_paco_geometry() {
        let g = Geometry {
            height: 80,
            width: 80,
            sub: (40.0, 40.0),
            add: (40.0, 40.0),
            rounding: Rounding::Trunc,
            radius: 4,
            edge: EdgeRule::Box,
        };
        let (sep, pa) = (18.0, 30.0);
        let (y0, x0) = frame_position((40.0, 40.0), sep, pa, 0.0);
        for angle in [-40.0, -3.5, 0.0, 12.0, 40.0] {
            let (y, x) = frame_position((40.0, 40.0), sep, pa, angle);
            let (gy, gx) = g.position(y0, x0, angle);
            assert!((y - gy).abs() < 1e-9 && (x - gx).abs() < 1e-9, "{angle}");
        }
    }

    #[test]
    fn adi_cube_is_deterministic_and_has_the_planet() {
        let params = PlanetAdiParams::default();
        let a = synthetic_adi_with_planet(8, 48, 3, &params);
        let b = synthetic_adi_with_planet(8, 48, 3, &params);
        assert_eq!(a.cube, b.cube);
        assert_eq!(a.cube.dim(), (8, 48, 48));
        assert_eq!(a.angles.len(), 8);
        assert!((a.angles[7] - a.angles[0] - params.rotation_deg).abs() < 1e-9);
        // monotonic, fastest mid-sequence (meridian transit)
        let d: Vec<f64> = a
            .angles
            .windows(2)
            .into_iter()
            .map(|w| w[1] - w[0])
            .collect();
        assert!(d.iter().all(|&v| v > 0.0) && d[3] > d[0]);
        let (ph, pw) = a.psf.dim();
        assert_eq!((ph, pw), (21, 21));
        assert_eq!(
            a.psf
                .indexed_iter()
                .fold(((0, 0), 0.0), |m, (i, &v)| if v > m.1 { (i, v) } else { m })
                .0,
            (10, 10)
        );
        assert!(a.cube.iter().all(|v| v.is_finite()));
        let c = synthetic_adi_with_planet(8, 48, 4, &params);
        assert_ne!(a.cube, c.cube);
    }
}
