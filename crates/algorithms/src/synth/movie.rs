//! Synthetic fluorescence-microscopy movies with ground truth (spec §6): the input of the
//! detection benchmarks ([`crate::detect::synth::benchmark_detect`]), `arraybridge demo` and
//! `arraybridge bench detect`.
//!
//! Frame model: a flat background of 10 photons; each spot is a Gaussian of σ ~ U(1.5, 2.5) and
//! peak ~ U(50, 150) photons integrated over the pixel area ([`super::pixel_weight`]); Poisson
//! noise; stored as u16. Initial positions are uniform, ≥ 10 px apart and ≥ 8 px from the border;
//! between frames every particle moves by N(0, `step`) per axis, reflected at the 8 px margin.
//! Deterministic for a seed ([`SplitMix`]).

use ndarray::Array3;

use super::{SplitMix, pixel_weight};
use crate::detect::Movie;

/// One ground-truth particle in one frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruthPoint {
    /// Frame index.
    pub frame: u32,
    /// Particle index.
    pub particle: u32,
    /// Row.
    pub y: f64,
    /// Column.
    pub x: f64,
    /// Gaussian σ of the spot.
    pub sigma: f64,
    /// Peak amplitude in photons.
    pub amplitude: f64,
}

/// A synthetic u16 movie and its ground truth.
#[derive(Debug, Clone)]
pub struct SyntheticMovie {
    /// The movie `[frames][size][size]`.
    pub movie: Movie,
    /// Every particle in every frame.
    pub truth: Vec<TruthPoint>,
}

/// Generate a movie of `frames` square frames of `size` pixels with `particles` spots.
pub fn synthetic_movie(
    frames: usize,
    size: usize,
    particles: usize,
    step: f64,
    seed: u64,
) -> SyntheticMovie {
    let mut rng = SplitMix::new(seed);
    let (lo, hi) = (8.0, (size as f64 - 9.0).max(8.0));
    let mut pts: Vec<(f64, f64, f64, f64)> = Vec::with_capacity(particles);
    let mut tries = 0;
    while pts.len() < particles && tries < particles * 1000 {
        tries += 1;
        let (y, x) = (rng.range(lo, hi), rng.range(lo, hi));
        if pts.iter().all(|p| (p.0 - y).hypot(p.1 - x) >= 10.0) {
            pts.push((y, x, rng.range(1.5, 2.5), rng.range(50.0, 150.0)));
        }
    }
    let mut data = vec![0u16; frames * size * size];
    let mut truth = Vec::with_capacity(frames * pts.len());
    let mut expected = vec![0.0f64; size * size];
    for t in 0..frames {
        if t > 0 {
            for p in &mut pts {
                for c in [&mut p.0, &mut p.1] {
                    *c += step * rng.normal();
                    if *c < lo {
                        *c = 2.0 * lo - *c;
                    }
                    if *c > hi {
                        *c = 2.0 * hi - *c;
                    }
                    *c = c.clamp(lo, hi);
                }
            }
        }
        expected.iter_mut().for_each(|v| *v = 10.0);
        for (k, &(y, x, s, a)) in pts.iter().enumerate() {
            truth.push(TruthPoint {
                frame: t as u32,
                particle: k as u32,
                y,
                x,
                sigma: s,
                amplitude: a,
            });
            let total = a * 2.0 * std::f64::consts::PI * s * s;
            let r = (5.0 * s).ceil() as isize;
            let (cy, cx) = (y.round() as isize, x.round() as isize);
            let ay: Vec<f64> = (-r..=r)
                .map(|d| pixel_weight((cy + d) as f64, y, s))
                .collect();
            let ax: Vec<f64> = (-r..=r)
                .map(|d| pixel_weight((cx + d) as f64, x, s))
                .collect();
            for (i, fy) in ay.iter().enumerate() {
                let yy = cy + i as isize - r;
                if yy < 0 || yy >= size as isize {
                    continue;
                }
                for (j, fx) in ax.iter().enumerate() {
                    let xx = cx + j as isize - r;
                    if xx < 0 || xx >= size as isize {
                        continue;
                    }
                    expected[yy as usize * size + xx as usize] += total * fy * fx;
                }
            }
        }
        let frame = &mut data[t * size * size..(t + 1) * size * size];
        for (o, &e) in frame.iter_mut().zip(&expected) {
            *o = rng.poisson(e).min(65535.0) as u16;
        }
    }
    let movie = Array3::from_shape_vec((frames, size, size), data)
        .map(Movie::U16)
        .unwrap_or_else(|_| Movie::U16(Array3::zeros((0, size, size))));
    SyntheticMovie { movie, truth }
}
