//! Seeded synthetic data with ground truth: the random stream of every generator of the
//! workspace ([`SplitMix`], with its uniform, normal and Poisson draws) and the pixel integration
//! of Gaussian spots ([`erf`], [`pixel_weight`]).
//!
//! * [`movie`]: fluorescence-microscopy movies of Brownian particles (the detection benchmarks,
//!   `arraybridge demo`, `arraybridge bench detect`).
//! * [`adi`]: angular-differential-imaging cubes for PACO: a coronagraphic sequence with one
//!   injected planet (`arraybridge demo`) and the simple timing cube of
//!   [`crate::paco::bench`].
//!
//! Every generator draws from [`SplitMix`], is deterministic for a seed and needs no external
//! random-number crate: the same seed gives the same numbers on every machine.

pub mod adi;
pub mod movie;

/// A deterministic SplitMix64 stream: the random numbers of every generator of
/// [`crate::synth`].
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

/// Fraction of a unit Gaussian of width `sigma` centred at `c` that falls in pixel `p` (pixel
/// centres at integers): the pixel integration of every spot the generators draw.
pub fn pixel_weight(p: f64, c: f64, sigma: f64) -> f64 {
    let k = sigma * std::f64::consts::SQRT_2;
    0.5 * (erf((p + 0.5 - c) / k) - erf((p - 0.5 - c) / k))
}
