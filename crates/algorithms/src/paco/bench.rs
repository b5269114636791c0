//! Synthetic ADI data and a timing report, shared by the criterion bench, the timing example and
//! `arraybridge bench paco`.

use std::time::Instant;

use bridge_core::{BridgeError, Device, Result};
use ndarray::{Array1, Array2, Array3};

use super::{PacoParams, PsfNorm, SubPixel, Variant, paco};

/// xorshift64* uniform numbers in [0, 1) (deterministic, no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A synthetic ADI cube (`t` frames of `n`×`n`): a quasi-static speckle field falling off with
/// the distance to the star, slowly evolving speckles and white noise; angles 0…60°; a 21×21
/// Gaussian PSF of FWHM 4 px. Deterministic for a given `seed`.
pub fn synthetic_adi(t: usize, n: usize, seed: u64) -> (Array3<f64>, Array1<f64>, Array2<f64>) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let stat = Array2::from_shape_fn((n, n), |_| rng.next());
    let c = (n / 2) as f64;
    let cube = Array3::from_shape_fn((t, n, n), |(f, y, x)| {
        let r = ((y as f64 - c).powi(2) + (x as f64 - c).powi(2)).sqrt() + 1.0;
        100.0 / r * stat[[y, x]] * (1.0 + 0.1 * (f as f64 * 0.1 + x as f64).sin()) + rng.next()
    });
    let angles = Array1::from_shape_fn(t, |i| 60.0 * i as f64 / (t.max(2) - 1) as f64);
    let sigma = 4.0 / (8.0f64.ln() * 2.0).sqrt();
    let psf = Array2::from_shape_fn((21, 21), |(y, x)| {
        (-((y as f64 - 10.0).powi(2) + (x as f64 - 10.0).powi(2)) / (2.0 * sigma * sigma)).exp()
    });
    (cube, angles, psf)
}

/// One timing row.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// What was run.
    pub what: String,
    /// Cube shape (T, N, N).
    pub shape: (usize, usize, usize),
    /// Best wall time of the repetitions, seconds.
    pub best_s: f64,
    /// Median wall time, seconds.
    pub median_s: f64,
}

/// Time PACO (VIP variant) on [`synthetic_adi`] without and with sub-pixel templates
/// (`Table { q: 32 }` and `Spline5`), `reps` runs each after one warm-up run. A mode the device
/// does not support (an [`BridgeError::Unsupported`] answer, e.g. `Spline5` on a device without
/// it) gets no row.
pub fn bench_report(t: usize, n: usize, reps: usize, device: Device) -> Result<Vec<BenchRow>> {
    let (cube, angles, psf) = synthetic_adi(t, n, 7);
    let mut rows = Vec::new();
    for (name, sub) in [
        ("paco, no sub-pixel", SubPixel::Off),
        ("paco, sub-pixel table q=32", SubPixel::Table { q: 32 }),
        ("paco, sub-pixel spline5", SubPixel::Spline5),
    ] {
        let p = PacoParams {
            variant: Variant::Vip,
            subpixel: sub,
            psf_norm: PsfNorm::Factor(9.54),
            device,
            ..Default::default()
        };
        match paco(cube.view(), angles.view(), psf.view(), &p) {
            Err(BridgeError::Unsupported(why)) if sub == SubPixel::Spline5 => {
                log::info!("bench paco: {name} skipped on {device}: {why}");
                continue;
            }
            r => {
                r?;
            }
        }
        let mut times = Vec::with_capacity(reps.max(1));
        for _ in 0..reps.max(1) {
            let t0 = Instant::now();
            paco(cube.view(), angles.view(), psf.view(), &p)?;
            times.push(t0.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        rows.push(BenchRow {
            what: name.into(),
            shape: (t, n, n),
            best_s: times[0],
            median_s: times[times.len() / 2],
        });
    }
    Ok(rows)
}

/// Format [`bench_report`] rows as a table.
pub fn format_table(rows: &[BenchRow]) -> String {
    let mut s = format!(
        "{:<30} {:>14} {:>10} {:>10}\n",
        "what", "cube", "best s", "median s"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<30} {:>14} {:>10.4} {:>10.4}\n",
            r.what,
            format!("{}x{}x{}", r.shape.0, r.shape.1, r.shape.2),
            r.best_s,
            r.median_s
        ));
    }
    s
}
