//! Per-pixel background statistics (spec §3): mean, sample covariance, shrinkage, Cholesky.
//!
//! The cube is first centred per pixel (`c_t[p] = r_t[p] − μ[p]`); the patch mean at θ is then
//! `m_i = μ[θ + d_i]` exactly and the sample covariance is `S_ij = (1/T) Σ_t c_t[θ+d_i] c_t[θ+d_j]`.
//! Because `d_j − d_i` takes only ~|D−D|/2 distinct values, the products are shared between
//! pixels through a lag table `G_δ[p] = Σ_t c_t[p] c_t[p+δ]`, which costs `N²·|Δ|·T` instead of
//! `N²·K²·T/2` and keeps the two-pass (centred) precision.

use bridge_core::{BridgeError, Device, Result};
use ndarray::ArrayView3;
use rayon::prelude::*;

use super::settings::Variant;

/// Centred cube and the index tables shared by all kernels.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub h: usize,
    pub w: usize,
    pub t: usize,
    /// Centred cube, pixel-major: `cen[p * t + frame]`.
    pub cen: Vec<f64>,
    /// Disk offsets (dy, dx).
    pub disk: Vec<(isize, isize)>,
    /// Flat offsets `dy * w + dx` of the disk.
    pub offs: Vec<isize>,
    /// Lags (dy, dx) ≥ (0, 0) lexicographically.
    pub lags: Vec<(isize, isize)>,
    /// `lag_idx[i * K + j]` (i ≤ j): index into `lags` of `d_j − d_i`.
    pub lag_idx: Vec<u32>,
}

/// The CPU out-of-memory error for a failed allocation of `bytes`.
pub(crate) fn oom(bytes: usize) -> BridgeError {
    BridgeError::OutOfMemory {
        device: Device::Cpu,
        requested: bytes as u64,
        attempts: 1,
    }
}

/// A vector of `n` copies of `v`, or [`BridgeError::OutOfMemory`] instead of aborting.
pub(crate) fn try_vec<T: Clone>(n: usize, v: T) -> Result<Vec<T>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| oom(n * std::mem::size_of::<T>()))?;
    out.resize(n, v);
    Ok(out)
}

#[inline(always)]
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; 4];
    let ca = a.chunks_exact(4);
    let cb = b.chunks_exact(4);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        acc[0] += x[0] * y[0];
        acc[1] += x[1] * y[1];
        acc[2] += x[2] * y[2];
        acc[3] += x[3] * y[3];
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// The distinct lags `d_j − d_i` (j ≥ i) of a patch's offsets, in order of first appearance,
/// and `lag_idx[i·K + j]` (i ≤ j, 0 below the diagonal): the index of `d_j − d_i` among them.
/// The CPU's lag table and the device's (`paco_lag`) use the same tables.
pub(crate) fn lag_tables(disk: &[(isize, isize)]) -> (Vec<(isize, isize)>, Vec<u32>) {
    let k = disk.len();
    let mut lags: Vec<(isize, isize)> = Vec::new();
    let mut lag_idx = vec![0u32; k * k];
    for i in 0..k {
        for j in i..k {
            let d = (disk[j].0 - disk[i].0, disk[j].1 - disk[i].1);
            let idx = match lags.iter().position(|&l| l == d) {
                Some(p) => p,
                None => {
                    lags.push(d);
                    lags.len() - 1
                }
            };
            lag_idx[i * k + j] = idx as u32;
        }
    }
    (lags, lag_idx)
}

impl Prepared {
    /// Centre the cube per pixel and build the lag tables.
    pub(crate) fn new(cube: ArrayView3<'_, f64>, disk: Vec<(isize, isize)>) -> Result<Self> {
        let (t, h, w) = cube.dim();
        let mut cen = try_vec(h * w * t, 0.0f64)?;
        cen.par_chunks_mut(w * t)
            .enumerate()
            .for_each(|(y, rowbuf)| {
                for x in 0..w {
                    let px = &mut rowbuf[x * t..(x + 1) * t];
                    for (f, v) in px.iter_mut().enumerate() {
                        *v = cube[[f, y, x]];
                    }
                    let mean = px.iter().sum::<f64>() / t as f64;
                    for v in px.iter_mut() {
                        *v -= mean;
                    }
                }
            });
        let (lags, lag_idx) = lag_tables(&disk);
        let offs = disk.iter().map(|&(dy, dx)| dy * w as isize + dx).collect();
        Ok(Prepared {
            h,
            w,
            t,
            cen,
            disk,
            offs,
            lags,
            lag_idx,
        })
    }

    /// Number of patch pixels K.
    pub(crate) fn k(&self) -> usize {
        self.disk.len()
    }

    /// Centred column of pixel `p` (T values).
    #[inline(always)]
    pub(crate) fn col(&self, p: usize) -> &[f64] {
        &self.cen[p * self.t..(p + 1) * self.t]
    }

    /// Lag table for pixel rows `[pa, pb)`: `g[(p − pa·w)·L + l]`; NaN where `p + lag` leaves
    /// the frame.
    pub(crate) fn lag_table(&self, pa: usize, pb: usize, g: &mut Vec<f64>) -> Result<()> {
        let nl = self.lags.len();
        let w = self.w;
        let need = (pb - pa) * w * nl;
        g.clear();
        g.try_reserve_exact(need).map_err(|_| oom(need * 8))?;
        g.resize(need, 0.0);
        g.par_chunks_mut(w * nl)
            .enumerate()
            .for_each(|(ry, row)| self.lag_row(pa + ry, row));
        Ok(())
    }

    /// One row of the lag table.
    #[inline(always)]
    fn lag_row_impl(&self, y: usize, row: &mut [f64]) {
        let (w, nl) = (self.w, self.lags.len());
        for x in 0..w {
            let p = y * w + x;
            let cp = self.col(p);
            let out = &mut row[x * nl..(x + 1) * nl];
            for (o, &(ly, lx)) in out.iter_mut().zip(&self.lags) {
                let (qy, qx) = (y as isize + ly, x as isize + lx);
                *o = if qy < 0 || qx < 0 || qy as usize >= self.h || qx as usize >= w {
                    f64::NAN
                } else {
                    dot(cp, self.col(qy as usize * w + qx as usize))
                };
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn lag_row_avx2(&self, y: usize, row: &mut [f64]) {
        self.lag_row_impl(y, row)
    }

    /// One row of the lag table, AVX2 when the CPU has it.
    fn lag_row(&self, y: usize, row: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { self.lag_row_avx2(y, row) };
            return;
        }
        self.lag_row_impl(y, row)
    }
}

/// Per-thread scratch for the per-pixel kernel (no allocation in the hot loop).
#[derive(Debug, Clone)]
pub(crate) struct Scratch {
    /// Lower Cholesky factor of C, row-major K×K.
    pub l: Vec<f64>,
    /// Reciprocal diagonal of L.
    pub inv_diag: Vec<f64>,
    pub v: Vec<f64>,
    pub u: Vec<f64>,
    /// Multi-RHS work matrix (grown on demand).
    pub mbuf: Vec<f64>,
    /// Per-column accumulators (grown on demand).
    pub acc: Vec<f64>,
}

impl Scratch {
    pub(crate) fn new(k: usize) -> Self {
        Scratch {
            l: vec![0.0; k * k],
            inv_diag: vec![0.0; k],
            v: vec![0.0; k],
            u: vec![0.0; k],
            mbuf: Vec::new(),
            acc: Vec::new(),
        }
    }
}

/// Sum of squares with four accumulators (vectorisable).
#[inline(always)]
fn sumsq(a: &[f64]) -> f64 {
    dot(a, a)
}

/// Shrinkage factor ρ from S given by its upper triangle (row-major K×K), spec §3.
#[inline(always)]
pub(crate) fn shrinkage(s: &[f64], k: usize, t: usize, variant: Variant) -> f64 {
    let mut tr = 0.0;
    let mut dsq = 0.0;
    let mut off = 0.0;
    for i in 0..k {
        let d = s[i * k + i];
        tr += d;
        dsq += d * d;
        off += sumsq(&s[i * k + i + 1..(i + 1) * k]);
    }
    let tr2 = dsq + 2.0 * off;
    let num = match variant {
        Variant::Paper => tr2 + tr * tr - 2.0 * dsq,
        Variant::Vip => tr2 + tr * tr - 2.0 * tr2,
    };
    let den = (t as f64 + 1.0) * (tr2 - dsq);
    if den == 0.0 {
        1.0
    } else {
        (num / den).clamp(0.0, 1.0)
    }
}

/// Shrink S (upper triangle of `sc.l`) into C and factor it: the lower triangle of `sc.l`
/// receives L (C = L·Lᵀ). Returns false if the pixel is degenerate (S_ii ≤ 0, non-finite, or C
/// not positive definite).
#[inline(always)]
pub(crate) fn shrink_and_factor(sc: &mut Scratch, k: usize, t: usize, variant: Variant) -> bool {
    let l = &mut sc.l;
    for i in 0..k {
        let d = l[i * k + i];
        if !(d.is_finite() && d > 0.0) {
            return false;
        }
    }
    let rho = shrinkage(l, k, t, variant);
    let scale = match variant {
        Variant::Paper => 1.0,
        Variant::Vip => 0.5,
    };
    cholesky_upper_in(l, &mut sc.inv_diag, k, scale, (1.0 - rho) * scale)
}

/// Cholesky factor of `C_ii = diag·S_ii`, `C_ij = off·S_ij`, in place, with S given by the upper
/// triangle of `l` (row-major K×K). On return the upper triangle holds `R = Lᵀ` (C = RᵀR), i.e.
/// `L[i][j]` is stored at `l[j·K + i]` (i ≥ j), and `inv_diag[j] = 1/L[j][j]`.
///
/// Right-looking: every update is a contiguous axpy on a row of the upper triangle, so the
/// inner loops vectorise without reductions.
#[inline(always)]
pub(crate) fn cholesky_upper_in(
    l: &mut [f64],
    inv_diag: &mut [f64],
    k: usize,
    diag: f64,
    off: f64,
) -> bool {
    for j in 0..k {
        let row = &mut l[j * k + j..(j + 1) * k];
        row[0] *= diag;
        for v in row[1..].iter_mut() {
            *v *= off;
        }
    }
    for j in 0..k {
        let (head, tail) = l.split_at_mut((j + 1) * k);
        let rj = &mut head[j * k + j..];
        let d = rj[0];
        if !(d > 0.0 && d.is_finite()) {
            return false;
        }
        let ljj = d.sqrt();
        let inv = 1.0 / ljj;
        rj[0] = ljj;
        inv_diag[j] = inv;
        for v in rj[1..].iter_mut() {
            *v *= inv;
        }
        let rj = &rj[1..];
        // Trailing update: row kk (kk > j) of the upper triangle, columns kk..K.
        for (n, &f) in rj.iter().enumerate() {
            let kk = j + 1 + n;
            let dst = &mut tail[(kk - j - 1) * k + kk..(kk - j) * k];
            for (dv, &sv) in dst.iter_mut().zip(&rj[n..]) {
                *dv -= f * sv;
            }
        }
    }
    true
}

/// Forward substitution `L v = b` in place (b → v), L stored as R = Lᵀ in the upper triangle.
#[inline(always)]
pub(crate) fn forward(l: &[f64], inv_diag: &[f64], k: usize, b: &mut [f64]) {
    for j in 0..k {
        let vj = b[j] * inv_diag[j];
        b[j] = vj;
        let rj = &l[j * k + j + 1..(j + 1) * k];
        for (bv, &r) in b[j + 1..k].iter_mut().zip(rj) {
            *bv -= vj * r;
        }
    }
}

/// Forward substitution for two right-hand sides at once.
#[inline(always)]
pub(crate) fn forward2(l: &[f64], inv_diag: &[f64], k: usize, b1: &mut [f64], b2: &mut [f64]) {
    for j in 0..k {
        let v1 = b1[j] * inv_diag[j];
        let v2 = b2[j] * inv_diag[j];
        b1[j] = v1;
        b2[j] = v2;
        let rj = &l[j * k + j + 1..(j + 1) * k];
        for ((x1, x2), &r) in b1[j + 1..k].iter_mut().zip(b2[j + 1..k].iter_mut()).zip(rj) {
            *x1 -= v1 * r;
            *x2 -= v2 * r;
        }
    }
}

/// Backward substitution `Lᵀ x = b` in place (b → x).
#[inline(always)]
pub(crate) fn backward(l: &[f64], inv_diag: &[f64], k: usize, b: &mut [f64]) {
    for i in (0..k).rev() {
        let s = dot(&l[i * k + i + 1..(i + 1) * k], &b[i + 1..k]);
        b[i] = (b[i] - s) * inv_diag[i];
    }
}

impl Prepared {
    /// Load the (unscaled, 1/T) sample covariance of pixel `theta` (flat index) from the lag table
    /// of rows starting at `pa` into the upper triangle (with diagonal) of `sc.l`.
    #[inline(always)]
    pub(crate) fn load_cov(&self, theta: usize, g: &[f64], pa: usize, sc: &mut Scratch) {
        let k = self.k();
        let nl = self.lags.len();
        let base = pa * self.w;
        let inv_t = 1.0 / self.t as f64;
        let l = &mut sc.l;
        for i in 0..k {
            let p = (theta as isize + self.offs[i]) as usize - base;
            let grow = &g[p * nl..(p + 1) * nl];
            let idx = &self.lag_idx[i * k + i..(i + 1) * k];
            let dst = &mut l[i * k + i..(i + 1) * k];
            for (d, &ix) in dst.iter_mut().zip(idx) {
                *d = grow[ix as usize] * inv_t;
            }
        }
    }

    /// Centred patch of frame `frame` at pixel `theta` into `out` (K values).
    #[inline(always)]
    pub(crate) fn centred_patch(&self, theta: usize, frame: usize, out: &mut [f64]) {
        for (o, &off) in out.iter_mut().zip(&self.offs) {
            *o = self.cen[(theta as isize + off) as usize * self.t + frame];
        }
    }
}

/// Forward substitution `L X = B` for `ncol` right-hand sides stored row-major in `m`
/// (`m[i * ncol + c]`), vectorised along the right-hand sides.
#[inline(always)]
pub(crate) fn forward_multi(l: &[f64], inv_diag: &[f64], k: usize, m: &mut [f64], ncol: usize) {
    for i in 0..k {
        let (done, rest) = m.split_at_mut(i * ncol);
        let row = &mut rest[..ncol];
        // L[i][j] is stored at l[j·K + i].
        let li = |j: usize| l[j * k + i];
        let mut j = 0;
        while j + 4 <= i {
            let (l0, l1, l2, l3) = (li(j), li(j + 1), li(j + 2), li(j + 3));
            let r0 = &done[j * ncol..(j + 1) * ncol];
            let r1 = &done[(j + 1) * ncol..(j + 2) * ncol];
            let r2 = &done[(j + 2) * ncol..(j + 3) * ncol];
            let r3 = &done[(j + 3) * ncol..(j + 4) * ncol];
            for c in 0..ncol {
                row[c] -= (l0 * r0[c] + l1 * r1[c]) + (l2 * r2[c] + l3 * r3[c]);
            }
            j += 4;
        }
        while j < i {
            let lj = li(j);
            let rj = &done[j * ncol..(j + 1) * ncol];
            for (r, &v) in row.iter_mut().zip(rj) {
                *r -= lj * v;
            }
            j += 1;
        }
        let d = inv_diag[i];
        for r in row.iter_mut() {
            *r *= d;
        }
    }
}
