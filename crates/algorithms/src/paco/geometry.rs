//! Patch disk, star centre and source trajectories (spec §2 and §4).

use std::f64::consts::PI;

use super::settings::{EdgeRule, Rounding};

/// The patch disk `D_R = {(dy, dx) : dy² + dx² ≤ R²}` in row-major order (dy outer, dx inner).
/// The list has [`disk_area`]`(radius)` offsets (about π·R², 16 bytes each): a caller checks
/// the radius against its frame (and its memory) first, as `PacoJob` does.
pub fn disk_offsets(radius: usize) -> Vec<(isize, isize)> {
    let r = isize::try_from(radius).unwrap_or(isize::MAX);
    let r2 = i128::from(r as i64) * i128::from(r as i64);
    let mut out = Vec::new();
    for dy in -r..=r {
        for dx in -r..=r {
            let (y, x) = (dy as i128, dx as i128);
            if y * y + x * x <= r2 {
                out.push((dy, dx));
            }
        }
    }
    out
}

/// The number of offsets [`disk_offsets`] lists for `radius`, counted row by row (no list:
/// O(radius) time, no memory).
pub fn disk_area(radius: usize) -> usize {
    // from 2^32 on, π·R² is beyond 2^64: saturated without counting 2^32 rows
    if radius as u64 >= 1 << 32 {
        return usize::MAX;
    }
    let r = radius as u128;
    let mut n = 0usize;
    for dy in 0..=r {
        let rem = r * r - dy * dy;
        // the largest m with m² ≤ rem
        let mut m = (rem as f64).sqrt() as u128;
        while m * m > rem {
            m -= 1;
        }
        while (m + 1) * (m + 1) <= rem {
            m += 1;
        }
        let row = (2 * m + 1) as usize;
        n = n.saturating_add(if dy == 0 { row } else { 2 * row });
    }
    n
}

/// Frame geometry: frame size, star centre and rounding of trajectory positions.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    /// Frame height (rows).
    pub height: usize,
    /// Frame width (columns).
    pub width: usize,
    /// Value subtracted from φ0 to get offsets from the star, (y, x).
    pub sub: (f64, f64),
    /// Value added back to rotated offsets, (y, x).
    pub add: (f64, f64),
    /// How sub-pixel positions become pixels.
    pub rounding: Rounding,
    /// Patch radius R (for the statistics edge rule).
    pub radius: usize,
    /// Which pixels may hold statistics.
    pub edge: EdgeRule,
}

impl Geometry {
    /// Sub-pixel position (y_ℓ, x_ℓ) in a raw frame of derotation angle `angle_deg` of the output
    /// position `(y0, x0)`, with the operation order of VIP (bit-compatible, spec §4).
    #[inline]
    pub fn position(&self, y0: f64, x0: f64, angle_deg: f64) -> (f64, f64) {
        let (r, theta0) = self.polar(y0, x0);
        self.position_polar(r, theta0, angle_deg)
    }

    /// Radius and polar angle (degrees) of `(y0, x0)` about the star.
    #[inline]
    pub fn polar(&self, y0: f64, x0: f64) -> (f64, f64) {
        let dx = x0 - self.sub.1;
        let dy = y0 - self.sub.0;
        ((dx * dx + dy * dy).sqrt(), dy.atan2(dx) * (180.0 / PI))
    }

    /// [`Geometry::position`] from precomputed [`Geometry::polar`] values.
    #[inline]
    pub fn position_polar(&self, r: f64, theta0: f64, angle_deg: f64) -> (f64, f64) {
        let theta = -angle_deg + theta0;
        let rad = theta * (PI / 180.0);
        let (s, c) = rad.sin_cos();
        (r * s + self.add.0, r * c + self.add.1)
    }

    /// Integer pixel of one coordinate under the rounding rule, as a signed value.
    #[inline]
    pub fn round(&self, v: f64) -> f64 {
        match self.rounding {
            Rounding::Trunc => v.trunc(),
            Rounding::Nearest => (v + 0.5).floor(),
        }
    }

    /// Half-open ranges `(y_lo, y_hi)` and `(x_lo, x_hi)` of the pixels that may hold
    /// statistics: `R+1 ≤ v ≤ N−R−2` with [`EdgeRule::Box`] (VIP), `R ≤ v ≤ N−1−R` with
    /// [`EdgeRule::Disk`]. Empty ranges when the frame is too small.
    #[inline]
    pub fn stats_ranges(&self) -> ((usize, usize), (usize, usize)) {
        let r = self.radius;
        let range = |n: usize| match self.edge {
            EdgeRule::Box => (
                r.saturating_add(1),
                n.saturating_sub(r.saturating_add(1))
                    .max(r.saturating_add(1)),
            ),
            EdgeRule::Disk => (r, n.saturating_sub(r).max(r)),
        };
        (range(self.height), range(self.width))
    }

    /// Whether pixel (y, x) may hold statistics under the edge rule (spec §2): the box rule
    /// `R+1 ≤ y ≤ H−R−2` (same for x) by default, `R ≤ y ≤ H−1−R` with [`EdgeRule::Disk`].
    #[inline]
    pub fn in_box(&self, y: f64, x: f64) -> bool {
        let ((ylo, yhi), (xlo, xhi)) = self.stats_ranges();
        y >= ylo as f64 && y < yhi as f64 && x >= xlo as f64 && x < xhi as f64
    }

    /// Pixel (flat index) and fractional offsets `(fy, fx)` of `(y0, x0)` in frame `angle_deg`, or
    /// `None` if the pixel fails the box rule.
    #[inline]
    pub fn pixel(&self, y0: f64, x0: f64, angle_deg: f64) -> Option<(usize, f64, f64)> {
        let (r, th) = self.polar(y0, x0);
        self.pixel_polar(r, th, angle_deg)
    }

    /// [`Geometry::pixel`] from precomputed [`Geometry::polar`] values.
    #[inline]
    pub fn pixel_polar(&self, r: f64, theta0: f64, angle_deg: f64) -> Option<(usize, f64, f64)> {
        let (y, x) = self.position_polar(r, theta0, angle_deg);
        self.pixel_of(y, x)
    }

    /// Pixel (flat index) and fractional offsets `(fy, fx)` of the raw-frame position `(y, x)`
    /// under the rounding rule, or `None` if the pixel fails the edge rule (or `y`, `x` are not
    /// finite).
    #[inline]
    pub fn pixel_of(&self, y: f64, x: f64) -> Option<(usize, f64, f64)> {
        let (py, px) = (self.round(y), self.round(x));
        if !self.in_box(py, px) {
            return None;
        }
        let at = (py as usize)
            .checked_mul(self.width)?
            .checked_add(px as usize)?;
        Some((at, y - py, x - px))
    }

    /// Whether pixel (y, x) (non-negative integers) is in the statistics box.
    #[inline]
    pub fn in_box_usize(&self, y: usize, x: usize) -> bool {
        self.in_box(y as f64, x as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_area_counts_disk_offsets() {
        for r in 0..60 {
            assert_eq!(disk_area(r), disk_offsets(r).len(), "radius {r}");
        }
        // a radius no list could hold is counted in O(radius)
        assert!(disk_area(1_000_000) > 3_141_592_000_000);
    }

    #[test]
    fn odd_centre_rules() {
        let g = |sub: (f64, f64), add: (f64, f64)| Geometry {
            height: 63,
            width: 63,
            sub,
            add,
            rounding: Rounding::Trunc,
            radius: 4,
            edge: EdgeRule::Box,
        };
        // Default: the centre pixel (31, 31) stays put at every angle.
        let auto = g((31.0, 31.0), (31.0, 31.0));
        for ang in [0.0, 17.0, 90.0] {
            let (y, x) = auto.position(31.0, 31.0, ang);
            assert!((y - 31.0).abs() < 1e-12 && (x - 31.0).abs() < 1e-12);
        }
        // A point 10 px right of the star goes to 10 px above it after −90°... rotated by −angle.
        let (y, x) = auto.position(31.0, 41.0, -90.0);
        assert!(
            (y - 41.0).abs() < 1e-12 && (x - 31.0).abs() < 1e-12,
            "{y} {x}"
        );
        // VIP's odd-N convention: offsets from N/2 = 31.5, added back to floor(N/2) = 31.
        let vip = g((31.5, 31.5), (31.0, 31.0));
        let (y, x) = vip.position(31.0, 31.0, 0.0);
        assert!((y - 30.5).abs() < 1e-12 && (x - 30.5).abs() < 1e-12);
    }

    #[test]
    fn edge_rules() {
        let g = |edge| Geometry {
            height: 20,
            width: 16,
            sub: (10.0, 8.0),
            add: (10.0, 8.0),
            rounding: Rounding::Trunc,
            radius: 4,
            edge,
        };
        // Box: R+1 ≤ v ≤ N−R−2; Disk: R ≤ v ≤ N−1−R.
        assert_eq!(g(EdgeRule::Box).stats_ranges(), ((5, 15), (5, 11)));
        assert_eq!(g(EdgeRule::Disk).stats_ranges(), ((4, 16), (4, 12)));
        let b = g(EdgeRule::Box);
        assert!(b.in_box(5.0, 5.0) && b.in_box(14.0, 10.0));
        assert!(!b.in_box(4.0, 5.0) && !b.in_box(15.0, 5.0) && !b.in_box(5.0, 11.0));
        let d = g(EdgeRule::Disk);
        assert!(d.in_box(4.0, 4.0) && d.in_box(15.0, 11.0));
        assert!(!d.in_box(3.0, 4.0) && !d.in_box(16.0, 4.0) && !d.in_box(4.0, 12.0));
        assert!(!d.in_box(-1.0, 4.0));
    }

    #[test]
    fn disk_sizes() {
        let k: Vec<usize> = (1..=6).map(|r| disk_offsets(r).len()).collect();
        assert_eq!(k, vec![5, 13, 29, 49, 81, 113]);
    }
}
