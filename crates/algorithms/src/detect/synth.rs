//! Synthetic movies with ground truth, and detection scoring: the building blocks of
//! `benchmark_gpu(movie_size, n_particles, batch_sizes)` (spec §4, §6).
//!
//! Frame model (spec §6): a flat background of 10 photons; each spot is a Gaussian of
//! σ ~ U(1.5, 2.5) and peak ~ U(50, 150) photons integrated over the pixel area (erf); Poisson
//! noise; stored as u16. Initial positions are uniform, ≥ 10 px apart and ≥ 8 px from the border;
//! between frames every particle moves by N(0, `step`) per axis, reflected at the 8 px margin.
//! The generator is deterministic for a seed (its own SplitMix64 stream; no external RNG).

use ndarray::Array3;

use super::Movie;

/// A deterministic SplitMix64 stream.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A stream for `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[a, b)`.
    pub fn range(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.uniform()
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Poisson sample (Knuth below λ = 30, normal approximation above).
    pub fn poisson(&mut self, lambda: f64) -> f64 {
        if lambda <= 0.0 {
            return 0.0;
        }
        if lambda < 30.0 {
            let l = (-lambda).exp();
            let mut k = 0.0;
            let mut p = 1.0;
            loop {
                p *= self.uniform();
                if p <= l {
                    return k;
                }
                k += 1.0;
            }
        }
        (lambda + lambda.sqrt() * self.normal()).round().max(0.0)
    }
}

/// erf with |error| < 1.2e-7 (Numerical Recipes `erfc` Chebyshev fit).
pub fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 { 1.0 - erfc } else { erfc - 1.0 }
}

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
            let c = s * std::f64::consts::SQRT_2;
            let (cy, cx) = (y.round() as isize, x.round() as isize);
            let ay: Vec<f64> = (-r..=r)
                .map(|d| {
                    let p = (cy + d) as f64;
                    0.5 * (erf((p + 0.5 - y) / c) - erf((p - 0.5 - y) / c))
                })
                .collect();
            let ax: Vec<f64> = (-r..=r)
                .map(|d| {
                    let p = (cx + d) as f64;
                    0.5 * (erf((p + 0.5 - x) / c) - erf((p - 0.5 - x) / c))
                })
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

/// Recall, precision and localisation error of detections against the truth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MatchStats {
    /// Matched truth points.
    pub matched: usize,
    /// Detections.
    pub detections: usize,
    /// Truth points.
    pub truth: usize,
    /// matched / truth.
    pub recall: f64,
    /// matched / detections.
    pub precision: f64,
    /// Root-mean-square distance of the matched pairs.
    pub rmse: f64,
}

/// Match detections `(frame, y, x)` to the truth one-to-one within `max_dist`, per frame,
/// greedily by ascending distance (ties by index).
pub fn match_truth(
    detections: &[(u32, f64, f64)],
    truth: &[TruthPoint],
    max_dist: f64,
) -> MatchStats {
    use std::collections::BTreeMap;
    type Points = Vec<(f64, f64)>;
    let mut by_frame: BTreeMap<u32, (Points, Points)> = BTreeMap::new();
    for d in detections {
        by_frame.entry(d.0).or_default().0.push((d.1, d.2));
    }
    for t in truth {
        by_frame.entry(t.frame).or_default().1.push((t.y, t.x));
    }
    let (mut matched, mut se) = (0usize, 0.0f64);
    for (dets, tr) in by_frame.values() {
        let mut pairs = Vec::new();
        for (i, d) in dets.iter().enumerate() {
            for (j, t) in tr.iter().enumerate() {
                let dist = (d.0 - t.0).hypot(d.1 - t.1);
                if dist <= max_dist {
                    pairs.push((dist, i, j));
                }
            }
        }
        pairs.sort_by(|a, b| {
            a.0.partial_cmp(&b.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then((a.1, a.2).cmp(&(b.1, b.2)))
        });
        let (mut ud, mut ut) = (vec![false; dets.len()], vec![false; tr.len()]);
        for (dist, i, j) in pairs {
            if !ud[i] && !ut[j] {
                ud[i] = true;
                ut[j] = true;
                matched += 1;
                se += dist * dist;
            }
        }
    }
    let ratio = |a: usize, b: usize| {
        if b == 0 {
            f64::NAN
        } else {
            a as f64 / b as f64
        }
    };
    MatchStats {
        matched,
        detections: detections.len(),
        truth: truth.len(),
        recall: ratio(matched, truth.len()),
        precision: ratio(matched, detections.len()),
        rmse: if matched == 0 {
            f64::NAN
        } else {
            (se / matched as f64).sqrt()
        },
    }
}

/// One row of [`benchmark_detect`] (the seed's `benchmark_gpu` report).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// Frames per batch.
    pub batch_size: usize,
    /// Frames detected.
    pub frames: usize,
    /// Wall time of the whole movie, upload included (s).
    pub end_to_end_s: f64,
    /// Kernel-only time when the back end reports it (s).
    pub kernel_s: Option<f64>,
    /// End-to-end milliseconds per frame.
    pub ms_per_frame: f64,
    /// End-to-end frames per second.
    pub frames_per_s: f64,
    /// Detections.
    pub detections: usize,
    /// Scores against the truth (matching within 2 px).
    pub score: MatchStats,
}

/// Detect `movie` once per batch size with `detector` on `backend` and score every run against
/// the truth (the seed's `benchmark_gpu(movie_size, n_particles, batch_sizes)`).
pub fn benchmark_detect(
    movie: &SyntheticMovie,
    detector: &super::LogDetector,
    backend: &dyn super::DetectBackend,
    batch_sizes: &[usize],
) -> bridge_core::Result<Vec<BenchRow>> {
    let mut rows = Vec::new();
    for &bs in batch_sizes {
        let det = super::LogDetector {
            batch_size: bs,
            ..detector.clone()
        };
        let mut kernel = None::<f64>;
        let t0 = std::time::Instant::now();
        let ps = det.detect_movie_with(&movie.movie, backend, |_| {
            if let Some(k) = backend.last_kernel_seconds() {
                *kernel.get_or_insert(0.0) += k;
            }
        })?;
        let secs = t0.elapsed().as_secs_f64();
        let pts: Vec<(u32, f64, f64)> = ps
            .iter()
            .map(|p| {
                p.refined
                    .map_or((p.frame, p.y, p.x), |r| (p.frame, r.y, r.x))
            })
            .collect();
        let frames = movie.movie.len();
        rows.push(BenchRow {
            batch_size: bs,
            frames,
            end_to_end_s: secs,
            kernel_s: kernel,
            ms_per_frame: 1e3 * secs / frames.max(1) as f64,
            frames_per_s: frames as f64 / secs.max(1e-12),
            detections: ps.len(),
            score: match_truth(&pts, &movie.truth, 2.0),
        });
    }
    Ok(rows)
}
