//! The CPU executor of the two PACO passes (rayon, with the AVX2 kernels of [`super::simd`]):
//! the fast path (whitened matched-filter cube, then sums along trajectories) and the bucketed
//! path (pairs grouped by trajectory pixel, statistics per band of rows), both splitting a band
//! that does not fit in memory. Also [`PacoJob::ab_along`], which always runs here.

use bridge_core::{BridgeError, Result};
use ndarray::Array2;
use rayon::prelude::*;

use super::geometry::Geometry;
use super::job::PacoJob;
use super::settings::{SubPixel, Variant};
use super::simd;
use super::stats::{Prepared, Scratch, try_vec};
use super::templates::Templates;

impl PacoJob<'_> {
    /// a and b along explicit trajectories, on the CPU: `positions` holds, for every
    /// trajectory, the sub-pixel position `(y_ℓ, x_ℓ)` of the source in each raw frame ℓ (T
    /// rows per trajectory, frame order, flattened: `positions.len()` must be a multiple of T).
    /// Everything else is as for the geometric trajectories of output positions: the rounding
    /// rule picks `[φ_ℓ]`, the edge rule decides validity (NaN when any frame fails it), the
    /// sub-pixel mode builds `h_ℓ` from the fractional offsets, and contributions are summed in
    /// increasing ℓ. a and b are in the cube's units, like every back end's
    /// ([`PacoJob::ab_in_cube_units`]).
    ///
    /// Use it for geometries the star-centred rotation does not describe (a drifting star
    /// centre, field distortion, an orbit hypothesis), or to test what a different pixel choice
    /// does: `positions` from [`Geometry::position`] give exactly the numbers of
    /// [`paco_ab_at`].
    ///
    /// [`Geometry::position`]: crate::paco::Geometry::position
    /// [`paco_ab_at`]: crate::paco::paco_ab_at
    pub fn ab_along(&self, positions: &[(f64, f64)]) -> Result<(Vec<f64>, Vec<f64>)> {
        let t = self.angles.len();
        if !positions.len().is_multiple_of(t) {
            return Err(BridgeError::shape_mismatch(
                format!("a multiple of {t} positions (one per frame per trajectory)"),
                format!("{} positions", positions.len()),
                "PACO trajectories",
            ));
        }
        if let Some(i) = positions
            .iter()
            .position(|(y, x)| !(y.is_finite() && x.is_finite()))
        {
            return Err(BridgeError::InvalidInput(
                format!(
                    "trajectory {} has a non-finite position in frame {}",
                    i / t,
                    i % t
                )
                .into(),
            ));
        }
        let (mut a, mut b) = bucket_ab(self, &simd::Trajectories::Explicit(positions))?;
        self.ab_in_cube_units(&mut a, &mut b);
        Ok((a, b))
    }
}

/// Number of θ rows per lag-table band.
fn band_rows(job: &PacoJob<'_>, nlags: usize) -> usize {
    let per_row = job.geom.width * nlags * 8;
    let rows = job.params.max_tile_bytes / per_row.max(1);
    rows.saturating_sub(2 * job.params.psf_rad).max(1)
}

/// Rows of θ that can hold statistics (half-open).
fn box_rows(job: &PacoJob<'_>) -> (usize, usize) {
    job.geom.stats_ranges().0
}

/// Fast path: q and z for every pixel, then sums along trajectories.
pub(crate) fn fast_maps(job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
    let prep = Prepared::new(job.cube.view(), job.disk.clone())?;
    let tpl = Templates::new(&job.psf_n.psf, &job.disk, SubPixel::Off, job.geom.rounding)?;
    let Templates::Centred(h0) = tpl else {
        return Err(BridgeError::Unsupported(
            "internal: centred template expected".into(),
        ));
    };
    let (h, w, t) = (prep.h, prep.w, prep.t);
    let r = job.params.psf_rad;
    let mut q = try_vec(h * w, f64::NAN)?;
    let mut z = try_vec(h * w * t, f64::NAN)?;
    let (y_lo, y_hi) = box_rows(job);
    let mut band = band_rows(job, prep.lags.len());
    let mut g = Vec::new();
    let mut ya = y_lo;
    let control = &job.params.control;
    control.set_total((y_hi - y_lo) as u64);
    while ya < y_hi {
        control.check("PACO")?;
        let yb = (ya + band).min(y_hi);
        let pa = ya - r;
        if let Err(e) = prep.lag_table(pa, yb + r, &mut g) {
            // Out of memory: split the band and retry, down to one row.
            if band == 1 {
                return Err(e);
            }
            g = Vec::new();
            band = band.div_ceil(2);
            log::info!("paco: out of memory for a lag-table band; retrying with {band} rows");
            continue;
        }
        fill_rows(
            &prep,
            &g,
            job,
            &h0,
            (ya, yb),
            &mut q[ya * w..yb * w],
            &mut z[ya * w * t..yb * w * t],
        );
        ya = yb;
    }
    control.check("PACO")?;
    drop(g);
    sum_trajectories(job, &q, &z, true)
}

/// q and z of the statistics rows `[ya, yb)` from the lag table `g` (which starts at row
/// `ya − R`), into `qrows` / `zrows` (those rows of the full-frame q and z). Each row done
/// advances the job's control; once it is cancelled, the rows not begun are skipped (the
/// caller's next check returns the error).
fn fill_rows(
    prep: &Prepared,
    g: &[f64],
    job: &PacoJob<'_>,
    h0: &[f64],
    (ya, _yb): (usize, usize),
    qrows: &mut [f64],
    zrows: &mut [f64],
) {
    let (w, t, k) = (prep.w, prep.t, prep.k());
    let pa = ya - job.params.psf_rad;
    let xr = job.geom.stats_ranges().1;
    let variant = job.params.variant;
    let control = &job.params.control;
    qrows
        .par_chunks_mut(w)
        .zip(zrows.par_chunks_mut(w * t))
        .enumerate()
        .for_each_init(
            || Scratch::new(k),
            |sc, (ry, (qrow, zrow))| {
                if control.is_cancelled() {
                    return;
                }
                simd::fast_row(prep, g, pa, ya + ry, xr, h0, variant, sc, qrow, zrow);
                control.advance(1);
            },
        );
}

/// The statistics rows of the fast path on the CPU, one range at a time (a device of a
/// multi-device run): the centred cube is prepared once.
pub(crate) struct FastRows<'j> {
    job: &'j PacoJob<'j>,
    prep: Prepared,
    h0: Vec<f64>,
    g: Vec<f64>,
}

impl<'j> FastRows<'j> {
    /// Prepare the centred cube and the centred template.
    pub(crate) fn new(job: &'j PacoJob<'j>) -> Result<Self> {
        let prep = Prepared::new(job.cube.view(), job.disk.clone())?;
        let h0 = job.centred_template()?;
        Ok(FastRows {
            job,
            prep,
            h0,
            g: Vec::new(),
        })
    }

    /// q (`(yb − ya)·W` values) and z (`(yb − ya)·W·T`) of the statistics rows `[ya, yb)`;
    /// NaN outside the statistics columns. Out of memory for the lag table is
    /// [`BridgeError::OutOfMemory`] (the caller splits the range).
    pub(crate) fn rows(&mut self, (ya, yb): (usize, usize)) -> Result<(Vec<f64>, Vec<f64>)> {
        let (w, t) = (self.prep.w, self.prep.t);
        let r = self.job.params.psf_rad;
        let mut q = try_vec((yb - ya) * w, f64::NAN)?;
        let mut z = try_vec((yb - ya) * w * t, f64::NAN)?;
        if let Err(e) = self.prep.lag_table(ya - r, yb + r, &mut self.g) {
            self.g = Vec::new();
            return Err(e);
        }
        fill_rows(
            &self.prep,
            &self.g,
            self.job,
            &self.h0,
            (ya, yb),
            &mut q,
            &mut z,
        );
        self.job.params.control.check("PACO")?;
        Ok((q, z))
    }
}

/// a and b of every output position from the full-frame q and z: sums along the trajectories
/// in increasing ℓ, in double (`dbl`) or, to match a float device bit for bit, in float; NaN
/// where a trajectory leaves the statistics.
pub(crate) fn sum_trajectories(
    job: &PacoJob<'_>,
    q: &[f64],
    z: &[f64],
    dbl: bool,
) -> Result<(Array2<f64>, Array2<f64>)> {
    let (h, w) = (job.geom.height, job.geom.width);
    let t = job.angles.len();
    let geom = job.geom;
    let angles = &job.angles;
    let mut a = Array2::<f64>::from_elem((h, w), f64::NAN);
    let mut b = Array2::<f64>::from_elem((h, w), f64::NAN);
    let a_sl = a
        .as_slice_mut()
        .ok_or_else(|| BridgeError::Unsupported("non-contiguous".into()))?;
    let b_sl = b
        .as_slice_mut()
        .ok_or_else(|| BridgeError::Unsupported("non-contiguous".into()))?;
    a_sl.par_chunks_mut(w)
        .zip(b_sl.par_chunks_mut(w))
        .enumerate()
        .for_each(|(y0, (arow, brow))| {
            for x0 in 0..w {
                let (mut sa, mut sb) = (0.0f64, 0.0f64);
                let (mut fa, mut fb) = (0.0f32, 0.0f32);
                let mut ok = true;
                let (rr, th0) = geom.polar(y0 as f64, x0 as f64);
                for (l, &ang) in angles.iter().enumerate() {
                    match geom.pixel_polar(rr, th0, ang) {
                        Some((theta, _, _)) if dbl => {
                            sa += q[theta];
                            sb += z[theta * t + l];
                        }
                        Some((theta, _, _)) => {
                            fa += q[theta] as f32;
                            fb += z[theta * t + l] as f32;
                        }
                        None => {
                            ok = false;
                            break;
                        }
                    }
                }
                if ok {
                    (arow[x0], brow[x0]) = if dbl {
                        (sa, sb)
                    } else {
                        (f64::from(fa), f64::from(fb))
                    };
                }
            }
        });
    Ok((a, b))
}

/// Bucketed path: pairs (φ0, ℓ) grouped by their trajectory pixel, statistics per band.
pub(crate) fn bucket_ab(
    job: &PacoJob<'_>,
    traj: &simd::Trajectories<'_>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let t = job.angles.len();
    let geom = job.geom;
    let angles = &job.angles;
    let n0 = traj.len(t);
    let w = geom.width;
    let pair_theta = pair_pixels(job, traj)?;
    let valid: Vec<bool> = pair_theta.chunks(t).map(|c| c[0] != u32::MAX).collect();
    let prep = Prepared::new(job.cube.view(), job.disk.clone())?;
    let tpl = Templates::new(
        &job.psf_n.psf,
        &job.disk,
        job.params.subpixel,
        geom.rounding,
    )?;
    let (k, r) = (prep.k(), job.params.psf_rad);
    let variant = job.params.variant;
    let (y_lo, y_hi) = box_rows(job);
    let band = band_rows(job, prep.lags.len());
    let nbands = (y_hi - y_lo).div_ceil(band);
    let (counts, mut by_band) = sort_by_band(pair_theta, w, (y_lo, band, nbands))?;
    let control = &job.params.control;
    control.set_total(counts[nbands] as u64);
    let mut a = vec![0.0f64; n0];
    let mut b = vec![0.0f64; n0];
    let mut g = Vec::new();
    let h0 = match &tpl {
        Templates::Centred(h) => Some(h.clone()),
        _ => None,
    };
    let bucket = Bucket {
        prep: &prep,
        tpl: &tpl,
        h0: h0.as_deref(),
        geom: &geom,
        angles,
        traj,
        variant,
        k,
        r,
        t,
        w,
        control,
    };
    for bi in 0..nbands {
        control.check("PACO")?;
        let pairs = &mut by_band[counts[bi]..counts[bi + 1]];
        if pairs.is_empty() {
            continue;
        }
        pairs.sort_unstable();
        let pairs: &[(u32, u32)] = pairs;
        let ya = y_lo + bi * band;
        let yb = (ya + band).min(y_hi);
        bucket.band(pairs, (ya, yb), &mut g, (&mut a, &mut b))?;
    }
    for ((av, bv), &ok) in a.iter_mut().zip(b.iter_mut()).zip(&valid) {
        if !ok {
            *av = f64::NAN;
            *bv = f64::NAN;
        }
    }
    Ok((a, b))
}

/// The trajectory pixel θ of every pair (φ0, ℓ), φ0-major, T per φ0: all `u32::MAX` for a φ0
/// whose trajectory leaves the statistics. An error past 2³² pairs.
#[inline]
fn pair_pixels(job: &PacoJob<'_>, traj: &simd::Trajectories<'_>) -> Result<Vec<u32>> {
    let t = job.angles.len();
    let geom = job.geom;
    let angles = &job.angles;
    let n0 = traj.len(t);
    // Trajectory pixel of every pair; u32::MAX for φ0 with an invalid trajectory.
    if n0.checked_mul(t).is_none_or(|n| n >= u32::MAX as usize) {
        return Err(BridgeError::Unsupported(format!(
            "{n0} positions × {t} frames exceed the 2³² (φ0, frame) pairs of one run; pass phi0s in parts"
        )));
    }
    let mut pair_theta = try_vec(n0 * t, u32::MAX)?;
    pair_theta
        .par_chunks_mut(t)
        .enumerate()
        .with_min_len(job.params.batch_size.min(n0.max(1)))
        .for_each(|(i0, row)| {
            let polar = match traj {
                simd::Trajectories::Grid(p) => Some(geom.polar(p[i0].0 as f64, p[i0].1 as f64)),
                simd::Trajectories::Explicit(_) => None,
            };
            for (l, &ang) in angles.iter().enumerate() {
                let px = match polar {
                    Some((rr, th0)) => geom.pixel_polar(rr, th0, ang),
                    None => traj.pixel(&geom, angles, i0, l),
                };
                match px {
                    Some((theta, _, _)) => row[l] = theta as u32,
                    None => {
                        row.fill(u32::MAX);
                        return;
                    }
                }
            }
        });
    Ok(pair_theta)
}

/// The start of every band in the pairs sorted by band (and the end of the last), and those
/// (θ, pair id) pairs ([`sort_by_band`]).
type ByBand = (Vec<usize>, Vec<(u32, u32)>);

/// Counting sort of (θ, pair id) by band of `band` rows from row `y_lo` (`nbands` bands of
/// `w`-pixel rows): the start of every band (and the end of the last) and the valid pairs in
/// band order, pair order within a band. `pair_theta` is dropped once sorted.
#[inline]
fn sort_by_band(
    pair_theta: Vec<u32>,
    w: usize,
    (y_lo, band, nbands): (usize, usize, usize),
) -> Result<ByBand> {
    // Counting sort of (θ, pair id) by band.
    let mut counts = vec![0usize; nbands + 1];
    for &th in &pair_theta {
        if th != u32::MAX {
            counts[(th as usize / w - y_lo) / band + 1] += 1;
        }
    }
    for i in 0..nbands {
        counts[i + 1] += counts[i];
    }
    let mut by_band = try_vec(counts[nbands], (0u32, 0u32))?;
    let mut fill = counts.clone();
    for (pid, &th) in pair_theta.iter().enumerate() {
        if th != u32::MAX {
            let bi = (th as usize / w - y_lo) / band;
            by_band[fill[bi]] = (th, pid as u32);
            fill[bi] += 1;
        }
    }
    drop(pair_theta);
    Ok((counts, by_band))
}

/// What every band of [`bucket_ab`] reads: the centred cube, the templates (and the centred
/// one, without sub-pixel templates), the geometry, angles and trajectories, and the sizes.
struct Bucket<'a> {
    prep: &'a Prepared,
    tpl: &'a Templates,
    h0: Option<&'a [f64]>,
    geom: &'a Geometry,
    angles: &'a [f64],
    traj: &'a simd::Trajectories<'a>,
    variant: Variant,
    /// Pixels per patch (K).
    k: usize,
    /// The patch radius.
    r: usize,
    /// Frames.
    t: usize,
    /// Frame width.
    w: usize,
    /// The job's cancellation and progress.
    control: &'a bridge_core::control::Control,
}

impl Bucket<'_> {
    /// Add the contributions of one band's pairs (sorted by θ) of rows `[ya, yb)` to a and b:
    /// the lag table of its rows in `g`, the rows split in halves (down to one row) while the
    /// table does not fit in memory.
    #[inline]
    fn band(
        &self,
        pairs: &[(u32, u32)],
        (ya, yb): (usize, usize),
        g: &mut Vec<f64>,
        (a, b): (&mut [f64], &mut [f64]),
    ) -> Result<()> {
        let (w, r) = (self.w, self.r);
        // Rows of the band, split further if the lag table does not fit in memory.
        let mut todo = vec![(ya, yb)];
        while let Some((sa, sb)) = todo.pop() {
            let lo = pairs.partition_point(|p| (p.0 as usize) < sa * w);
            let hi = pairs.partition_point(|p| (p.0 as usize) < sb * w);
            let sub = &pairs[lo..hi];
            if sub.is_empty() {
                continue;
            }
            let pa = sa - r;
            if let Err(e) = self.prep.lag_table(pa, sb + r, g) {
                if sb - sa == 1 {
                    return Err(e);
                }
                *g = Vec::new();
                let mid = sa + (sb - sa) / 2;
                log::info!("paco: out of memory for a lag-table band; splitting rows {sa}..{sb}");
                todo.push((mid, sb));
                todo.push((sa, mid));
                continue;
            }
            let ctx = simd::GroupCtx {
                prep: self.prep,
                g,
                pa,
                variant: self.variant,
                h0: self.h0,
                tpl: self.tpl,
                geom: self.geom,
                angles: self.angles,
                traj: self.traj,
            };
            process_pairs(&ctx, sub, (self.k, self.t), (a, b), self.control)?;
            self.control.check("PACO")?;
        }
        Ok(())
    }
}

/// Evaluate the pairs (sorted by θ) of one lag-table band and add their contributions to
/// a and b, in the (deterministic) order of the sorted pairs.
fn process_pairs(
    ctx: &simd::GroupCtx<'_>,
    pairs: &[(u32, u32)],
    (k, t): (usize, usize),
    (a, b): (&mut [f64], &mut [f64]),
    control: &bridge_core::control::Control,
) -> Result<()> {
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut s = 0;
    while s < pairs.len() {
        let mut e = s + 1;
        while e < pairs.len() && pairs[e].0 == pairs[s].0 {
            e += 1;
        }
        groups.push((s, e));
        s = e;
    }
    let mut contrib = try_vec(pairs.len(), (f64::NAN, f64::NAN))?;
    let mut chunks: Vec<&mut [(f64, f64)]> = Vec::with_capacity(groups.len());
    let mut rest: &mut [(f64, f64)] = &mut contrib;
    for &(s, e) in &groups {
        let (head, tail) = rest.split_at_mut(e - s);
        chunks.push(head);
        rest = tail;
    }
    groups.par_iter().zip(chunks.into_par_iter()).for_each_init(
        || Scratch::new(k),
        |sc, (&(s, e), out)| {
            // once cancelled, the groups not begun are skipped (the caller's check returns)
            if !control.is_cancelled() {
                simd::group(ctx, &pairs[s..e], sc, out);
                control.advance((e - s) as u64);
            }
        },
    );
    for (&(_, pid), &(ca, cb)) in pairs.iter().zip(&contrib) {
        let i0 = pid as usize / t;
        a[i0] += ca;
        b[i0] += cb;
    }
    Ok(())
}

/// Full-grid maps through the bucketed path.
pub(crate) fn bucket_maps(job: &PacoJob<'_>) -> Result<(Array2<f64>, Array2<f64>)> {
    let (h, w) = (job.geom.height, job.geom.width);
    let phi0s: Vec<(usize, usize)> = (0..h).flat_map(|y| (0..w).map(move |x| (y, x))).collect();
    let (a, b) = bucket_ab(job, &simd::Trajectories::Grid(&phi0s))?;
    let a =
        Array2::from_shape_vec((h, w), a).map_err(|e| BridgeError::Unsupported(e.to_string()))?;
    let b =
        Array2::from_shape_vec((h, w), b).map_err(|e| BridgeError::Unsupported(e.to_string()))?;
    Ok((a, b))
}
