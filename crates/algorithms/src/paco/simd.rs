//! The CPU's hot per-pixel kernels, compiled twice: portable and with AVX2 (selected at run
//! time). [`fast_row`] computes q and z for one row of the fast path; [`group`] evaluates the
//! pairs (φ0, ℓ) that land on one pixel θ in the bucketed path, described by [`GroupCtx`] and
//! the [`Trajectories`] being followed. The passes that drive them are in `paco/cpu.rs`.

use super::geometry::Geometry;
use super::settings::Variant;
use super::stats::{Prepared, Scratch, backward, dot, forward, forward_multi, shrink_and_factor};
use super::templates::Templates;

/// Inputs shared by the pair groups of one band.
pub(crate) struct GroupCtx<'a> {
    pub prep: &'a Prepared,
    pub g: &'a [f64],
    pub pa: usize,
    pub variant: Variant,
    pub h0: Option<&'a [f64]>,
    pub tpl: &'a Templates,
    pub geom: &'a Geometry,
    pub angles: &'a [f64],
    pub traj: &'a Trajectories<'a>,
}

/// The trajectories of one bucketed evaluation.
pub(crate) enum Trajectories<'a> {
    /// Output positions φ0 = (y0, x0), followed through the frames by the geometry (spec §4).
    Grid(&'a [(usize, usize)]),
    /// Explicit raw-frame positions `(y_ℓ, x_ℓ)`, T per trajectory, flattened.
    Explicit(&'a [(f64, f64)]),
}

impl Trajectories<'_> {
    /// Number of trajectories.
    pub(crate) fn len(&self, t: usize) -> usize {
        match self {
            Trajectories::Grid(p) => p.len(),
            Trajectories::Explicit(v) => v.len() / t.max(1),
        }
    }

    /// Pixel and fractional offsets of trajectory `i0` in frame `l` (None: fails the edge rule).
    #[inline]
    pub(crate) fn pixel(
        &self,
        geom: &Geometry,
        angles: &[f64],
        i0: usize,
        l: usize,
    ) -> Option<(usize, f64, f64)> {
        match self {
            Trajectories::Grid(p) => {
                let (y0, x0) = p[i0];
                geom.pixel(y0 as f64, x0 as f64, angles[l])
            }
            Trajectories::Explicit(v) => {
                let (y, x) = v[i0 * angles.len() + l];
                geom.pixel_of(y, x)
            }
        }
    }
}

/// q and z for the statistics pixels `xr` of row `y` (fast path).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fast_row_impl(
    prep: &Prepared,
    g: &[f64],
    pa: usize,
    y: usize,
    xr: (usize, usize),
    h0: &[f64],
    variant: Variant,
    sc: &mut Scratch,
    qrow: &mut [f64],
    zrow: &mut [f64],
) {
    let (w, t, k) = (prep.w, prep.t, prep.k());
    for x in xr.0..xr.1 {
        let theta = y * w + x;
        prep.load_cov(theta, g, pa, sc);
        if !shrink_and_factor(sc, k, t, variant) {
            continue;
        }
        sc.v.copy_from_slice(h0);
        forward(&sc.l, &sc.inv_diag, k, &mut sc.v);
        backward(&sc.l, &sc.inv_diag, k, &mut sc.v);
        qrow[x] = dot(h0, &sc.v);
        let zt = &mut zrow[x * t..(x + 1) * t];
        zt.fill(0.0);
        for (kk, &off) in prep.offs.iter().enumerate() {
            let wk = sc.v[kk];
            let c = prep.col((theta as isize + off) as usize);
            for (zv, &cv) in zt.iter_mut().zip(c) {
                *zv += wk * cv;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
fn fast_row_avx2(
    prep: &Prepared,
    g: &[f64],
    pa: usize,
    y: usize,
    xr: (usize, usize),
    h0: &[f64],
    variant: Variant,
    sc: &mut Scratch,
    qrow: &mut [f64],
    zrow: &mut [f64],
) {
    fast_row_impl(prep, g, pa, y, xr, h0, variant, sc, qrow, zrow)
}

/// q and z for every box pixel of row `y` (fast path), AVX2 when the CPU has it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fast_row(
    prep: &Prepared,
    g: &[f64],
    pa: usize,
    y: usize,
    xr: (usize, usize),
    h0: &[f64],
    variant: Variant,
    sc: &mut Scratch,
    qrow: &mut [f64],
    zrow: &mut [f64],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { fast_row_avx2(prep, g, pa, y, xr, h0, variant, sc, qrow, zrow) };
        return;
    }
    fast_row_impl(prep, g, pa, y, xr, h0, variant, sc, qrow, zrow)
}

/// Contributions (a_c, b_c) of all pairs landing on one pixel θ (pairs sorted by θ).
#[inline(always)]
fn group_impl(ctx: &GroupCtx<'_>, pairs: &[(u32, u32)], sc: &mut Scratch, out: &mut [(f64, f64)]) {
    let prep = ctx.prep;
    let (t, k) = (prep.t, prep.k());
    let theta = pairs[0].0 as usize;
    prep.load_cov(theta, ctx.g, ctx.pa, sc);
    if !shrink_and_factor(sc, k, t, ctx.variant) {
        return;
    }
    if let Some(h0) = ctx.h0 {
        // Centred template: w = C⁻¹ h0 once per pixel, then one dot per pair.
        sc.v.copy_from_slice(h0);
        forward(&sc.l, &sc.inv_diag, k, &mut sc.v);
        backward(&sc.l, &sc.inv_diag, k, &mut sc.v);
        let qv = dot(h0, &sc.v);
        for (o, &(_, pid)) in out.iter_mut().zip(pairs) {
            let l = pid as usize % t;
            prep.centred_patch(theta, l, &mut sc.u);
            *o = (qv, dot(&sc.v, &sc.u));
        }
        return;
    }
    // Sub-pixel templates: one forward substitution with 2P right-hand sides
    // [h_1 … h_P | x_1 … x_P], then a = |L⁻¹h|², b = (L⁻¹h)·(L⁻¹x).
    let p = pairs.len();
    let ncol = 2 * p;
    if sc.mbuf.len() < k * ncol {
        sc.mbuf.resize(k * ncol, 0.0);
    }
    if sc.acc.len() < ncol {
        sc.acc.resize(ncol, 0.0);
    }
    let mut valid = true;
    for (c, &(_, pid)) in pairs.iter().enumerate() {
        let (i0, l) = (pid as usize / t, pid as usize % t);
        let Some((_, fy, fx)) = ctx.traj.pixel(ctx.geom, ctx.angles, i0, l) else {
            valid = false;
            break;
        };
        ctx.tpl.fill(fy, fx, &mut sc.v);
        for (i, &off) in prep.offs.iter().enumerate() {
            sc.mbuf[i * ncol + c] = sc.v[i];
            sc.mbuf[i * ncol + p + c] = prep.cen[(theta as isize + off) as usize * t + l];
        }
    }
    if !valid {
        return;
    }
    let m = &mut sc.mbuf[..k * ncol];
    forward_multi(&sc.l, &sc.inv_diag, k, m, ncol);
    let (aa, bb) = sc.acc[..ncol].split_at_mut(p);
    aa.fill(0.0);
    bb.fill(0.0);
    for row in m.chunks_exact(ncol) {
        let (hv, xv) = row.split_at(p);
        for c in 0..p {
            aa[c] += hv[c] * hv[c];
            bb[c] += hv[c] * xv[c];
        }
    }
    for (c, o) in out.iter_mut().enumerate() {
        *o = (aa[c], bb[c]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn group_avx2(ctx: &GroupCtx<'_>, pairs: &[(u32, u32)], sc: &mut Scratch, out: &mut [(f64, f64)]) {
    group_impl(ctx, pairs, sc, out)
}

/// Contributions of the pairs at one pixel, AVX2 when the CPU has it.
pub(crate) fn group(
    ctx: &GroupCtx<'_>,
    pairs: &[(u32, u32)],
    sc: &mut Scratch,
    out: &mut [(f64, f64)],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        unsafe { group_avx2(ctx, pairs, sc, out) };
        return;
    }
    group_impl(ctx, pairs, sc, out)
}
