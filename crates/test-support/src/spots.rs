//! Real-like n-D test images: Gaussian spots on a noisy floor, from a seeded xorshift stream,
//! so that tests of every crate draw them the same way.
//!
//! ```
//! use test_support::spots::{Rng, Spots};
//! let mut rng = Rng(7);
//! let img = Spots { count: 3, ..Spots::default() }.image(&[4, 5, 6], &mut rng);
//! assert_eq!(img.len(), 120);
//! assert!(img.iter().all(|v| v.is_finite() && *v >= 0.1));
//! ```

/// A xorshift64 stream (any seed but 0).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `count` Gaussian spots, centres uniform over the image, amplitudes uniform in `amplitude`,
/// profile `exp(−d²/width2)`, on `floor + noise·u` (u uniform in [0, 1) per pixel).
#[derive(Debug, Clone, Copy)]
pub struct Spots {
    /// Number of spots.
    pub count: usize,
    /// Smallest and largest amplitude.
    pub amplitude: (f64, f64),
    /// `2σ²` of the spots' profile.
    pub width2: f64,
    /// The background level.
    pub floor: f64,
    /// The background noise's range.
    pub noise: f64,
}

impl Default for Spots {
    fn default() -> Self {
        Spots {
            count: 4,
            amplitude: (0.3, 0.9),
            width2: 4.5,
            floor: 0.1,
            noise: 0.05,
        }
    }
}

impl Spots {
    /// The image of shape `shape` (C order), its values in f64.
    pub fn image(&self, shape: &[usize], rng: &mut Rng) -> Vec<f64> {
        let (lo, hi) = self.amplitude;
        let centres: Vec<(Vec<f64>, f64)> = (0..self.count)
            .map(|_| {
                let c = shape.iter().map(|&d| rng.uniform() * d as f64).collect();
                (c, lo + (hi - lo) * rng.uniform())
            })
            .collect();
        let n: usize = shape.iter().product();
        (0..n)
            .map(|i| {
                let mut rem = i;
                let mut at = vec![0f64; shape.len()];
                for (a, &d) in shape.iter().enumerate().rev() {
                    at[a] = (rem % d) as f64;
                    rem /= d;
                }
                let b: f64 = centres
                    .iter()
                    .map(|(c, amp)| {
                        let d2: f64 = c.iter().zip(&at).map(|(c, x)| (c - x).powi(2)).sum();
                        amp * (-d2 / self.width2).exp()
                    })
                    .sum();
                self.floor + self.noise * rng.uniform() + b
            })
            .collect()
    }
}
