//! A uniform grid over points in `D` dimensions (1-D, 2-D, 3-D …) for fixed-radius neighbour
//! queries.
//!
//! Points are bucketed by cell `(⌊p₀ / cell⌋, …, ⌊p_{D−1} / cell⌋)` (keys saturate for huge or
//! infinite coordinates; a NaN lands in cell 0, where any distance to it is NaN and never within
//! range). A query returns every point in the 3^D cells around a position, so a point within
//! `cell` of it is always returned. Cells are a dense array when the occupied box is small
//! compared with the number of points (the usual case: one field of view), a hash map otherwise
//! (scattered or huge coordinates); both list the points of a cell in ascending index order.
//!
//! Shared by linking (`track`) and by `blob_log`'s overlap pruning; [`CellHasher`] also keys
//! the certified search's memo of exact voxels.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Multiplicative hasher for cell keys (`i64`s): much cheaper than SipHash, and the keys are
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

/// A cell key: hashed as its `D` integers one by one (an array's own `Hash` would hash a
/// length and then the bytes, one at a time through [`CellHasher::write`]), compared
/// lexicographically axis by axis (an unrolled loop: a slice comparison is much slower when
/// sorting the keys).
#[derive(Clone, Copy)]
struct Key<const D: usize>([i64; D]);

impl<const D: usize> Hash for Key<D> {
    #[inline(always)]
    fn hash<H: Hasher>(&self, state: &mut H) {
        for &k in &self.0 {
            state.write_i64(k);
        }
    }
}

impl<const D: usize> PartialEq for Key<D> {
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        (0..D).all(|a| self.0[a] == other.0[a])
    }
}

impl<const D: usize> Eq for Key<D> {}

impl<const D: usize> Ord for Key<D> {
    #[inline(always)]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        for a in 0..D {
            match self.0[a].cmp(&other.0[a]) {
                std::cmp::Ordering::Equal => {}
                o => return o,
            }
        }
        std::cmp::Ordering::Equal
    }
}

impl<const D: usize> PartialOrd for Key<D> {
    #[inline(always)]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

type CellMap<const D: usize, V> = HashMap<Key<D>, V, BuildHasherDefault<CellHasher>>;

enum Cells<const D: usize> {
    /// `start[c]..start[c + 1]` indexes `order` for cell `c = Σ (k_a − lo_a) · stride_a` (the
    /// last axis fastest).
    Dense {
        lo: [i64; D],
        len: [i64; D],
        stride: [i64; D],
        start: Vec<u32>,
    },
    /// Cell key → range of `order`.
    Hashed(CellMap<D, (u32, u32)>),
}

/// Points bucketed by cell (see the module documentation).
pub(crate) struct Grid<const D: usize> {
    cell: f64,
    cells: Cells<D>,
    /// Point indices grouped by cell, ascending within a cell.
    order: Vec<u32>,
}

/// Dense cells are used when there are at most this many per point (plus a constant): a cell
/// costs 4 bytes, and a dense query reads 3^(D−1) contiguous rows where a hashed one makes 3^D
/// hash lookups.
const DENSE_CELLS_PER_POINT: i64 = 16;

/// The dense layout of the cells of `keys` (`lo`, `len`, `stride` per axis), if the box they
/// occupy has few enough cells for `n` points.
fn dense_layout<const D: usize>(
    keys: &[Key<D>],
    n: usize,
) -> Option<([i64; D], [i64; D], [i64; D])> {
    let first = keys.first()?;
    let (mut lo, mut hi) = (first.0, first.0);
    for k in keys {
        for a in 0..D {
            lo[a] = lo[a].min(k.0[a]);
            hi[a] = hi[a].max(k.0[a]);
        }
    }
    let mut len = [0i64; D];
    let mut stride = [0i64; D];
    let mut cells = 1i64;
    for a in (0..D).rev() {
        len[a] = hi[a].checked_sub(lo[a])?.checked_add(1)?;
        stride[a] = cells;
        cells = cells.checked_mul(len[a])?;
    }
    (cells <= DENSE_CELLS_PER_POINT * n as i64 + 1024).then_some((lo, len, stride))
}

impl<const D: usize> Grid<D> {
    /// Bucket `pts` into cells of side `cell` (> 0).
    pub(crate) fn new(pts: &[[f64; D]], cell: f64) -> Self {
        let keys: Vec<Key<D>> = pts.iter().map(|p| Self::key(p, cell)).collect();
        let mut order: Vec<u32> = (0..pts.len() as u32).collect();
        let cells = match dense_layout(&keys, pts.len()) {
            Some((lo, len, stride)) => {
                let idx =
                    |k: &Key<D>| (0..D).map(|a| (k.0[a] - lo[a]) * stride[a]).sum::<i64>() as usize;
                let n_cells: i64 = len.iter().product();
                let mut start = vec![0u32; n_cells as usize + 1];
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
                    lo,
                    len,
                    stride,
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

    fn key(p: &[f64; D], cell: f64) -> Key<D> {
        // `as` saturates (±inf → i64 extremes, NaN → 0)
        Key(p.map(|c| (c / cell).floor() as i64))
    }

    /// Every point in the 3^D cells around `p`, appended to `out` (cleared first).
    pub(crate) fn near(&self, p: &[f64; D], out: &mut Vec<u32>) {
        out.clear();
        self.near_ranges(p, |r| out.extend_from_slice(&self.order[r]));
    }

    /// The point indices grouped by cell (ascending within a cell): [`Grid::near_ranges`]
    /// gives ranges of it, so a caller can keep its points' data in this order and read the
    /// neighbours of a position as contiguous runs.
    pub(crate) fn order(&self) -> &[u32] {
        &self.order
    }

    /// Call `f` with ranges of [`Grid::order`] that together hold the points of the 3^D cells
    /// around `p` (the points [`Grid::near`] lists, in the same order): with dense cells, one
    /// range per row of up to 3 cells along the last axis (they are contiguous), rows in
    /// lexicographic order; with hashed cells, one range per non-empty cell, in lexicographic
    /// order of their keys.
    pub(crate) fn near_ranges(&self, p: &[f64; D], mut f: impl FnMut(std::ops::Range<usize>)) {
        let key = Self::key(p, self.cell);
        match &self.cells {
            Cells::Dense {
                lo,
                len,
                stride,
                start,
            } => {
                let Some(last) = D.checked_sub(1) else {
                    // no axes: one cell
                    return f(0..self.order.len());
                };
                // the cells of a row along the last axis, clamped to the grid
                let Some(r) = key.0[last].checked_sub(lo[last]) else {
                    return;
                };
                let (a, b) = (
                    r.saturating_sub(1).max(0),
                    r.saturating_add(1).min(len[last] - 1),
                );
                if a > b {
                    return;
                }
                let mut off = [-1i64; D];
                off[last] = 0;
                loop {
                    if let Some(row) = Self::dense_row(&key, &off, lo, len, stride, last) {
                        let (s, e) = (start[row + a as usize], start[row + b as usize + 1]);
                        if s < e {
                            f(s as usize..e as usize);
                        }
                    }
                    if !next_offset(&mut off[..last]) {
                        return;
                    }
                }
            }
            Cells::Hashed(map) => {
                let mut off = [-1i64; D];
                loop {
                    if let Some(k) = shifted(&key, &off)
                        && let Some(&(s, e)) = map.get(&k)
                        && s < e
                    {
                        f(s as usize..e as usize);
                    }
                    if !next_offset(&mut off) {
                        return;
                    }
                }
            }
        }
    }

    /// The cell index of the first cell (last axis at `lo`) of the row of cells `key + off`
    /// along the last axis ([`None`]: outside the grid).
    #[inline(always)]
    fn dense_row(
        key: &Key<D>,
        off: &[i64; D],
        lo: &[i64; D],
        len: &[i64; D],
        stride: &[i64; D],
        last: usize,
    ) -> Option<usize> {
        let mut c = 0i64;
        for a in 0..last {
            let r = key.0[a].checked_add(off[a])?.checked_sub(lo[a])?;
            if !(0..len[a]).contains(&r) {
                return None;
            }
            c += r * stride[a];
        }
        Some(c as usize)
    }
}

/// The key `key + off` ([`None`]: past i64's range, where no point is).
#[inline(always)]
fn shifted<const D: usize>(key: &Key<D>, off: &[i64; D]) -> Option<Key<D>> {
    let mut k = [0i64; D];
    for a in 0..D {
        k[a] = key.0[a].checked_add(off[a])?;
    }
    Some(Key(k))
}

/// The next offset in {−1, 0, 1}^n after `off`, the last axis fastest: false after the last.
#[inline(always)]
fn next_offset(off: &mut [i64]) -> bool {
    for o in off.iter_mut().rev() {
        if *o < 1 {
            *o += 1;
            return true;
        }
        *o = -1;
    }
    false
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

    fn brute_nd<const D: usize>(pts: &[[f64; D]], p: &[f64; D], r: f64) -> Vec<u32> {
        (0..pts.len() as u32)
            .filter(|&i| {
                let q = pts[i as usize];
                (0..D).map(|a| (q[a] - p[a]).powi(2)).sum::<f64>().sqrt() <= r
            })
            .collect()
    }

    fn check_nd<const D: usize>(spread: f64, seed: u64) {
        let mut rng = crate::synth::SplitMix::new(seed);
        let pts: Vec<[f64; D]> = (0..800)
            .map(|_| std::array::from_fn(|_| rng.range(-spread, spread)))
            .collect();
        let grid = Grid::new(&pts, 2.0 * 1.25);
        let mut out = Vec::new();
        for p in pts.iter().take(200) {
            grid.near(p, &mut out);
            // each point at most once
            let mut all = out.clone();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), out.len());
            let want = brute_nd(&pts, p, 2.0);
            let got: Vec<u32> = all.into_iter().filter(|i| want.contains(i)).collect();
            assert_eq!(got, want, "D = {D}, spread {spread}");
        }
    }

    #[test]
    fn one_and_three_dimensions_find_every_neighbour() {
        // compact (dense cells) and scattered (hashed cells)
        for spread in [12.0, 1e9] {
            check_nd::<1>(spread * 20.0, 5);
            check_nd::<3>(spread, 6);
        }
        let grid = Grid::new(
            &[[f64::NAN, 0.0, 1.0], [1e300, -1e300, f64::INFINITY]],
            1e-300,
        );
        let mut out = Vec::new();
        grid.near(&[1e300, -1e300, f64::INFINITY], &mut out);
        assert_eq!(out, [1]);
    }
}
