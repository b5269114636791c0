//! A uniform grid over 2-D points for fixed-radius neighbour queries.
//!
//! Points are bucketed by cell `(⌊y / cell⌋, ⌊x / cell⌋)` (keys saturate for huge or infinite
//! coordinates; a NaN lands in cell 0, where any distance to it is NaN and never within range).
//! A query returns every point in the 3×3 cells around a position, so a point within `cell`
//! of it is always returned. Cells are a dense array when the occupied box is small compared with
//! the number of points (the usual case: one field of view), a hash map otherwise (scattered or
//! huge coordinates); both list the points of a cell in ascending index order.
//!
//! Shared by linking (`track`) and by `blob_log`'s overlap pruning; [`CellHasher`] also keys
//! the certified search's memo of exact voxels.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hasher for cell keys (two `i64`s): much cheaper than SipHash, and the keys are
/// not attacker-chosen in a way that matters (a collision costs time, never correctness).
#[derive(Default, Clone, Copy)]
pub(crate) struct CellHasher(u64);

impl Hasher for CellHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type CellMap<V> = HashMap<(i64, i64), V, BuildHasherDefault<CellHasher>>;

enum Cells {
    /// `start[c]..start[c + 1]` indexes `order` for cell `c = (ky − y0) · nx + (kx − x0)`.
    Dense {
        y0: i64,
        x0: i64,
        ny: i64,
        nx: i64,
        start: Vec<u32>,
    },
    /// Cell key → range of `order`.
    Hashed(CellMap<(u32, u32)>),
}

/// Points bucketed by cell (see the module documentation).
pub(crate) struct Grid {
    cell: f64,
    cells: Cells,
    /// Point indices grouped by cell, ascending within a cell.
    order: Vec<u32>,
}

/// Dense cells are used when there are at most this many per point (plus a constant).
const DENSE_CELLS_PER_POINT: i64 = 4;

impl Grid {
    /// Bucket `pts` into cells of side `cell` (> 0).
    pub(crate) fn new(pts: &[[f64; 2]], cell: f64) -> Self {
        let keys: Vec<(i64, i64)> = pts.iter().map(|p| Self::key(p, cell)).collect();
        let mut order: Vec<u32> = (0..pts.len() as u32).collect();
        let bounds = keys
            .iter()
            .fold(None, |b: Option<(i64, i64, i64, i64)>, k| {
                Some(match b {
                    None => (k.0, k.0, k.1, k.1),
                    Some((a, b, c, d)) => (a.min(k.0), b.max(k.0), c.min(k.1), d.max(k.1)),
                })
            });
        let dense = bounds.and_then(|(y0, y1, x0, x1)| {
            let ny = y1.checked_sub(y0)?.checked_add(1)?;
            let nx = x1.checked_sub(x0)?.checked_add(1)?;
            let n = ny.checked_mul(nx)?;
            (n <= DENSE_CELLS_PER_POINT * pts.len() as i64 + 1024).then_some((y0, x0, ny, nx))
        });
        let cells = match dense {
            Some((y0, x0, ny, nx)) => {
                let idx = |k: &(i64, i64)| ((k.0 - y0) * nx + (k.1 - x0)) as usize;
                let mut start = vec![0u32; (ny * nx) as usize + 1];
                for k in &keys {
                    start[idx(k) + 1] += 1;
                }
                for c in 1..start.len() {
                    start[c] += start[c - 1];
                }
                let mut fill = start.clone();
                for (i, k) in keys.iter().enumerate() {
                    let c = idx(k);
                    order[fill[c] as usize] = i as u32;
                    fill[c] += 1;
                }
                Cells::Dense {
                    y0,
                    x0,
                    ny,
                    nx,
                    start,
                }
            }
            None => {
                // stable: ascending index within a cell
                order.sort_by_key(|&i| keys[i as usize]);
                let mut map = CellMap::default();
                let mut a = 0usize;
                while a < order.len() {
                    let k = keys[order[a] as usize];
                    let mut b = a + 1;
                    while b < order.len() && keys[order[b] as usize] == k {
                        b += 1;
                    }
                    map.insert(k, (a as u32, b as u32));
                    a = b;
                }
                Cells::Hashed(map)
            }
        };
        Grid { cell, cells, order }
    }

    fn key(p: &[f64; 2], cell: f64) -> (i64, i64) {
        // `as` saturates (±inf → i64 extremes, NaN → 0)
        ((p[0] / cell).floor() as i64, (p[1] / cell).floor() as i64)
    }

    /// Every point in the 3×3 cells around `p`, appended to `out` (cleared first).
    pub(crate) fn near(&self, p: &[f64; 2], out: &mut Vec<u32>) {
        out.clear();
        self.near_ranges(p, |r| out.extend_from_slice(&self.order[r]));
    }

    /// The point indices grouped by cell (ascending within a cell): [`Grid::near_ranges`]
    /// gives ranges of it, so a caller can keep its points' data in this order and read the
    /// neighbours of a position as contiguous runs.
    pub(crate) fn order(&self) -> &[u32] {
        &self.order
    }

    /// Call `f` with the range of [`Grid::order`] of each non-empty cell of the 3×3 cells
    /// around `p` (the points [`Grid::near`] lists).
    pub(crate) fn near_ranges(&self, p: &[f64; 2], mut f: impl FnMut(std::ops::Range<usize>)) {
        let (ky, kx) = Self::key(p, self.cell);
        for dy in -1..=1i64 {
            for dx in -1..=1i64 {
                // a neighbour key past i64's range has no points
                let (Some(y), Some(x)) = (ky.checked_add(dy), kx.checked_add(dx)) else {
                    continue;
                };
                let range = match &self.cells {
                    Cells::Dense {
                        y0,
                        x0,
                        ny,
                        nx,
                        start,
                    } => {
                        let (Some(ry), Some(rx)) = (y.checked_sub(*y0), x.checked_sub(*x0)) else {
                            continue;
                        };
                        if !(0..*ny).contains(&ry) || !(0..*nx).contains(&rx) {
                            continue;
                        }
                        let c = (ry * nx + rx) as usize;
                        (start[c], start[c + 1])
                    }
                    Cells::Hashed(map) => match map.get(&(y, x)) {
                        Some(&r) => r,
                        None => continue,
                    },
                };
                if range.0 < range.1 {
                    f(range.0 as usize..range.1 as usize);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(pts: &[[f64; 2]], p: &[f64; 2], r: f64) -> Vec<u32> {
        (0..pts.len() as u32)
            .filter(|&i| {
                let q = pts[i as usize];
                ((q[0] - p[0]).powi(2) + (q[1] - p[1]).powi(2)).sqrt() <= r
            })
            .collect()
    }

    #[test]
    fn dense_and_hashed_find_every_neighbour() {
        let mut rng = crate::synth::SplitMix::new(3);
        // compact (dense cells) and scattered (hashed cells)
        for spread in [50.0, 1e9] {
            let pts: Vec<[f64; 2]> = (0..500)
                .map(|_| [rng.range(-spread, spread), rng.range(-spread, spread)])
                .collect();
            let grid = Grid::new(&pts, 3.0 * 1.25);
            let mut out = Vec::new();
            for p in pts.iter().take(100) {
                grid.near(p, &mut out);
                let mut got: Vec<u32> = out
                    .iter()
                    .copied()
                    .filter(|&i| brute(&pts, p, 3.0).contains(&i))
                    .collect();
                got.sort_unstable();
                assert_eq!(got, brute(&pts, p, 3.0));
            }
        }
        // extreme and non-finite keys do not overflow
        let pts = [
            [f64::INFINITY, -f64::INFINITY],
            [f64::NAN, 0.0],
            [1e300, 1e300],
        ];
        let grid = Grid::new(&pts, 1e-300);
        let mut out = Vec::new();
        grid.near(&[1e300, 1e300], &mut out);
        assert!(out.contains(&2));
        let empty = Grid::new(&[], 1.0);
        empty.near(&[0.0, 0.0], &mut out);
        assert!(out.is_empty());
    }
}
