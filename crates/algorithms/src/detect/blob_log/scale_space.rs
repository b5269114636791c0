//! The scale space and its peaks: the cube `cube[i] = −σ_i²·(L_yy + L_xx)` ([`log_cube`], with
//! the [`Precision`] choice), the effective threshold (spec §1.5), and the 3×3×3 local maxima
//! above it outside the border (the search itself in `scale_space/peaks.rs`, re-exported here;
//! the unit tests in `scale_space/tests.rs`).

use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::params::{BlobLogParams, border_covers};
use crate::detect::filters::{
    Avx2, Fused, LogKernels, LogScratch, log_plane_scaled, log_rows_scaled,
};
use crate::detect::real::{Real, give_buf, take_buf};

mod peaks;
pub(super) use peaks::find_peaks;
use peaks::{RowScratch, rows_peaks};

pub use crate::precision::Precision;

/// The scale-space cube, plane-major: `cube[i·h·w + y·w + x]` (exact f64 accumulation).
/// Errors as [`log_cube_acc`].
pub fn log_cube<T: Real>(image: &[T], h: usize, w: usize, sigmas: &[T]) -> Result<Vec<T>> {
    log_cube_acc(image, h, w, sigmas, Precision::F64)
}

/// The scale-space cube with a chosen accumulation. An image that is not `h × w` pixels (or
/// is empty), a σ that is not finite and positive, or a cube and kernels beyond the host
/// memory budget are errors, checked before anything is allocated.
pub fn log_cube_acc<T: Real>(
    image: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
    acc: Precision,
) -> Result<Vec<T>> {
    check_cube_inputs(image.len(), h, w, sigmas)?;
    Ok(match acc {
        Precision::Auto | Precision::F64 => log_cube_in::<T, f64>(image, h, w, sigmas),
        Precision::F32 => log_cube_in::<T, f32>(image, h, w, sigmas),
    })
}

/// [`log_cube_acc`]'s checks: the image's length, the σ, and its memory (the cube and work
/// images, the kernels, each thread's rows of the widest kernel) against the host budget.
fn check_cube_inputs<T: Real>(len: usize, h: usize, w: usize, sigmas: &[T]) -> Result<()> {
    if h == 0 || w == 0 || h.checked_mul(w) != Some(len) {
        return Err(BridgeError::shape_mismatch(
            format!("{h}x{w}"),
            len,
            "log_cube image",
        ));
    }
    if let Some(s) = sigmas
        .iter()
        .map(|s| s.to_f64())
        .find(|s| !(s.is_finite() && *s > 0.0))
    {
        return Err(BridgeError::invalid_argument(
            "sigmas",
            format!("every σ must be finite and positive, got {s}"),
        ));
    }
    // the whole cube and a few work images, the kernels, each thread's padded rows: the
    // estimates `LogDetector::check_memory` makes for a frame
    let largest = sigmas.iter().map(|s| s.to_f64()).fold(0.0, f64::max);
    let cube = crate::detect::backend::scale_space_host_bytes(h, w, sigmas.len());
    let (kernels, scratch) = crate::detect::detector::sigma_host_bytes(w, sigmas.len(), largest);
    let threads = rayon::current_num_threads() as u64;
    bridge_core::host::check_allocation(
        cube.saturating_add(kernels)
            .saturating_add(scratch.saturating_mul(threads)),
        &format!(
            "log_cube of {h}x{w} at {} scales (largest σ {largest})",
            sigmas.len()
        ),
        "use fewer scales, a smaller σ or a smaller image",
    )
}

fn log_cube_in<T: Real, A: Real>(image: &[T], h: usize, w: usize, sigmas: &[T]) -> Vec<T> {
    log_cube_extrema_in::<T, A>(image, h, w, sigmas).0
}

/// [`log_cube_acc`] and the cube's minimum and maximum, found while it is written (the same
/// values as [`threshold_of`]'s: NaN-free input).
fn log_cube_extrema_in<T: Real, A: Real>(
    image: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
) -> (Vec<T>, T, T) {
    let plane = h * w;
    let mut cube: Vec<T> = take_buf(plane * sigmas.len());
    let (padded, stride) = pad_frame::<T, A>(image, h, w);
    let image = &padded[..];
    let rmax = sigmas
        .iter()
        .map(|s| crate::detect::filters::kernel_radius(s.to_f64()))
        .max()
        .unwrap_or(0);
    let extrema: Vec<(T, T)> = cube
        .par_chunks_mut(plane.max(1))
        .zip(sigmas.par_iter())
        .map_init(
            || LogScratch::<T, A>::new(h, w, rmax),
            |scratch, (out, &s)| {
                let k = LogKernels::new(s.to_f64(), T::IS_F32);
                log_plane_scaled(image, stride, h, w, &k, scratch, out, s * s)
            },
        )
        .collect();
    give_buf(padded);
    let (lo, hi) = extrema
        .iter()
        .copied()
        .reduce(|a, b| {
            (
                if b.0 < a.0 { b.0 } else { a.0 },
                if b.1 > a.1 { b.1 } else { a.1 },
            )
        })
        .unwrap_or((T::ZERO, T::ZERO));
    (cube, lo, hi)
}

/// The `h × w` frame `image` converted to `A`, in rows [`padded_stride`] apart (a pooled
/// buffer: give it back with [`give_buf`]), and that stride.
///
/// [`padded_stride`]: crate::detect::filters::padded_stride
pub(super) fn pad_frame<S: Real, A: Real>(image: &[S], h: usize, w: usize) -> (Vec<A>, usize) {
    let stride = crate::detect::filters::padded_stride(w);
    let mut padded: Vec<A> = take_buf(h * stride);
    for (dst, src) in padded.chunks_mut(stride).zip(image.chunks(w.max(1))) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = A::from_f64(s.to_f64());
        }
    }
    (padded, stride)
}

/// A candidate peak before pruning.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cand<T> {
    pub(crate) y: usize,
    pub(crate) x: usize,
    pub(crate) s: usize,
    pub(crate) v: T,
    /// With a search margin (the certified f32 search, [`log_peaks_banded_in`]'s `relax`): bit
    /// `9·(ds + 1) + 3·(dy + 1) + (dx + 1)` set where the neighbour at (s + ds, y + dy, x + dx)
    /// (clamped to the cube, never the voxel itself) is within the margin of this value, so
    /// only exact values can tell which is larger; 0 otherwise.
    pub(crate) near: u32,
}

impl<T: Copy> Cand<T> {
    /// The same candidate with its value converted by `f`.
    pub(super) fn map<U>(&self, f: impl FnOnce(T) -> U) -> Cand<U> {
        Cand {
            y: self.y,
            x: self.x,
            s: self.s,
            v: f(self.v),
            near: self.near,
        }
    }
}

/// Effective threshold (spec §1.5) from the cube extrema `(lo, hi)`, and those extrema.
pub(super) fn threshold_from<T: Real>((lo, hi): (T, T), p: &BlobLogParams) -> (T, T, T) {
    let mut thr = p.threshold.map(T::from_f64).unwrap_or(lo);
    if let Some(rel) = p.threshold_rel {
        let t = T::from_f64(rel) * hi;
        if t > thr {
            thr = t;
        }
    }
    (thr, lo, hi)
}

/// Effective threshold (spec §1.5) and the cube extrema.
pub(super) fn threshold_of<T: Real>(cube: &[T], p: &BlobLogParams) -> (T, T, T) {
    const L: usize = 16;
    let (lo, hi) = cube
        .par_chunks(1 << 16)
        .map(|c| {
            // lane-wise extrema (vectorisable); NaN-free input is guaranteed by validation
            let mut lo = [c[0]; L];
            let mut hi = [c[0]; L];
            let mut it = c.chunks_exact(L);
            for ch in &mut it {
                for l in 0..L {
                    lo[l] = if ch[l] < lo[l] { ch[l] } else { lo[l] };
                    hi[l] = if ch[l] > hi[l] { ch[l] } else { hi[l] };
                }
            }
            let mut a = lo[0];
            let mut b = hi[0];
            for &v in lo.iter().chain(it.remainder()) {
                if v < a {
                    a = v;
                }
            }
            for &v in hi.iter().chain(it.remainder()) {
                if v > b {
                    b = v;
                }
            }
            (a, b)
        })
        .reduce_with(|a, b| {
            (
                if b.0 < a.0 { b.0 } else { a.0 },
                if b.1 > a.1 { b.1 } else { a.1 },
            )
        })
        .unwrap_or((T::ZERO, T::ZERO));
    threshold_from((lo, hi), p)
}
/// Bytes of the cube a band of [`log_peaks_banded`] aims to hold (half of a 1 MiB L2 cache:
/// the y passes' rows and the input rows they read share the rest).
const BAND_BYTES: usize = 512 << 10;

/// Rows of the cube computed per step of [`log_peaks_banded`]: `knob`
/// ([`super::CpuKnobs::band_rows`]) when set, otherwise as many as fit [`BAND_BYTES`] with all
/// `ns` planes, at least 8 (one row block of the y passes).
fn band_rows(ns: usize, w: usize, elem: usize, knob: Option<usize>) -> usize {
    let fit = BAND_BYTES / (ns.max(1) * w.max(1) * elem).max(1);
    knob.filter(|&b| b > 0)
        .unwrap_or_else(|| fit.saturating_sub(2).max(8))
        .min(1 << 16)
}

/// How many parts [`log_peaks_banded`] splits `h` rows into: parts of at least 4 bands, about
/// two per thread (idle threads steal a part).
fn band_parts(h: usize, band: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    (2 * threads).min(h.div_ceil(4 * band.max(1))).max(1)
}

/// The band (rows per step) and the parts of an `h × w` frame of `ns` planes of `elem`-byte
/// values: bands of [`band_rows`] rows, unless they would leave threads without a part: a
/// small frame (64 or 128 rows) then takes bands of `h / (4·threads)` rows, at least 8 (one
/// row block of the y passes), so that each thread gets a part (each recomputes the row either
/// side of its ends: 2 rows in 32 at worst). The values, and so the results, do not depend on
/// the split. A band set by the knob (`knob`: [`super::CpuKnobs::band_rows`]) is kept.
fn band_split(
    (h, w): (usize, usize),
    (ns, elem): (usize, usize),
    knob: Option<usize>,
) -> (usize, usize) {
    let band = band_rows(ns, w, elem, knob);
    let threads = rayon::current_num_threads().max(1);
    let parts = band_parts(h, band);
    if parts >= threads || knob.is_some_and(|b| b > 0) {
        return (band, parts);
    }
    let small = (h / (4 * threads)).max(8).min(band);
    (small, band_parts(h, small))
}

/// Host bytes of [`log_peaks_banded`] on one `h × w` frame with `ns` scales, at most: the
/// frame in f64 (the converted frame) and its padded copy, a third image for the candidates
/// and the rest of the frame's work, and the rings of every part (`band + 2` rows of every
/// scale, [`band_parts`] parts).
pub(crate) fn banded_host_bytes(h: usize, w: usize, ns: usize, knob: Option<usize>) -> u64 {
    let stride = crate::detect::filters::padded_stride(w) as u64;
    let (band, parts) = band_split((h, w), (ns, 8), knob);
    // a part's ring holds at most its rows and the one either side, plus two
    let ring = (band.min(h.div_ceil(parts) + 2) + 2) as u64;
    let parts = parts as u64;
    let (h, w, ns) = (h as u64, w as u64, ns as u64);
    let images = h.saturating_mul(w.saturating_mul(2).saturating_add(stride));
    let rings = parts
        .saturating_mul(ring)
        .saturating_mul(ns)
        .saturating_mul(w);
    images.saturating_add(rings).saturating_mul(8)
}

/// The scale space's 3×3×3 maxima without the cube: the planes are computed a band of rows at
/// a time (every scale of those rows), and the band's maxima are found while it is in cache,
/// instead of writing the whole cube (21.7 MB for a 424×640 frame and 10 scales, 470 MB for
/// 2048² and 14) to memory and reading it back. The rows are split into parts run in parallel;
/// each part keeps a ring of `band + 2` rows per plane (the 3×3×3 test of a band's first row
/// reads the row above it), and recomputes the row either side of its ends.
///
/// The threshold depends on the whole cube's extrema, which are known only at the end: a band
/// keeps the maxima above a lower bound of it (the absolute threshold, and `threshold_rel`
/// times the largest value seen so far), and the caller filters them with the final threshold.
/// Where that bound keeps too many (no threshold at all: a flat frame makes every voxel a
/// maximum), a part drops them past 8 bytes per pixel and its rows are searched again once
/// the threshold is known, so memory stays bounded.
/// Returns the maxima in raster order of (y, x, scale) — the order of [`find_peaks`] — and the
/// cube's minimum and maximum. Every value equals [`log_cube`]'s bit for bit.
pub(super) fn log_peaks_banded<T: Real>(
    image: &[T],
    h: usize,
    w: usize,
    sigmas: &[T],
    (acc, knob): (Precision, Option<usize>),
    p: &BlobLogParams,
) -> (Vec<Cand<T>>, T, T) {
    let elem = std::mem::size_of::<T>();
    let (band, nparts) = band_split((h, w), (sigmas.len(), elem), knob);
    let split = (band, nparts, None);
    let planes = exact_planes(sigmas);
    let b = match acc {
        Precision::Auto | Precision::F64 => {
            log_peaks_banded_in::<T, f64>(image, (h, w), &planes, p, split, None)
        }
        Precision::F32 => log_peaks_banded_in::<T, f32>(image, (h, w), &planes, p, split, None),
    };
    (b.cands, b.lo, b.hi)
}

/// The kernels and the scale `σ²` (in `T`) of every plane, as SciPy builds them for a `T`
/// working type.
pub(super) fn exact_planes<T: Real>(sigmas: &[T]) -> Vec<(LogKernels, T)> {
    sigmas
        .iter()
        .map(|&s| (LogKernels::new(s.to_f64(), T::IS_F32), s * s))
        .collect()
}

/// What [`log_peaks_banded_in`] found: the maxima (in raster order of (y, x, scale)), the
/// cube's extrema, and with `relax` the extrema of every run of rows computed (to find the
/// voxels near the cube's extrema again) and whether the candidates overflowed the cap (then
/// nothing else is meaningful).
pub(super) struct Banded<T> {
    pub(super) cands: Vec<Cand<T>>,
    pub(super) lo: T,
    pub(super) hi: T,
    pub(super) spans: Vec<Span<T>>,
    pub(super) overflow: bool,
}

/// Rows `rows.0..rows.1` of plane `s` were computed with these extrema.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span<T> {
    pub(super) s: usize,
    pub(super) rows: (usize, usize),
    pub(super) lo: T,
    pub(super) hi: T,
}

/// [`log_peaks_banded`] with `band` rows per step (at least 1), the rows split into `nparts`
/// parts (at least 1), and at most `cap` maxima kept per part on the first pass (`None`: 8
/// bytes per pixel of the part). `planes` holds each plane's kernels and scale.
///
/// `relax = Some(e)` is the search of an approximate cube (f32 sums) whose every value is
/// within `e / 2` of the exact one ([`super::certified`]): a voxel is kept when it is within
/// `e` of its neighbourhood's maximum (with the neighbours within `e` of it marked in
/// [`Cand::near`]) and above the lower bound of the threshold less `e`; the extrema of every
/// run of rows computed are recorded; the threshold is never applied a second time (past the
/// cap, the result says `overflow`).
fn log_peaks_banded_in<T: Real, A: Real>(
    image: &[T],
    (h, w): (usize, usize),
    planes: &[(LogKernels, T)],
    p: &BlobLogParams,
    split: (usize, usize, Option<usize>),
    relax: Option<f64>,
) -> Banded<T> {
    let (padded, stride) = pad_frame::<T, A>(image, h, w);
    let out = log_peaks_padded::<T, A>((&padded, stride), (h, w), planes, p, split, (relax, None));
    give_buf(padded);
    out
}

/// [`log_peaks_banded_in`] of a frame already in `A`, rows `stride` apart ([`pad_frame`]): the
/// parts searched in parallel ([`PartSearch::run`]), their extrema merged, the parts that
/// overflowed their cap searched again with the final threshold, and their maxima joined in
/// order. `fused`: the kernels of an f32 cube of f32 sums ([`LogScratch::with_fused`]).
fn log_peaks_padded<T: Real, A: Real>(
    (img, stride): (&[A], usize),
    (h, w): (usize, usize),
    planes: &[(LogKernels, T)],
    p: &BlobLogParams,
    (band, nparts, cap): (usize, usize, Option<usize>),
    (relax, fused): (Option<f64>, Option<Fused>),
) -> Banded<T> {
    let ns = planes.len();
    let empty = |lo: T, hi: T| Banded {
        cands: Vec::new(),
        lo,
        hi,
        spans: Vec::new(),
        overflow: false,
    };
    if h == 0 || w == 0 || ns == 0 {
        return empty(T::ZERO, T::ZERO);
    }
    let (band, nparts) = (band.max(1), nparts.clamp(1, h));
    let rmax = planes.iter().map(|(k, _)| k.radius()).max().unwrap_or(0);
    let per = h.div_ceil(nparts);
    let (by, bx) = p.exclude_border;
    let test = !border_covers(p.exclude_border, h, w);
    let rel = p.threshold_rel.filter(|&r| r >= 0.0).map(T::from_f64);
    let simd = Avx2::detect();
    let abs = p.threshold.map(T::from_f64);
    let margin = relax.map_or(T::ZERO, T::from_f64);
    // maxima kept per part on the first pass: 8 bytes per pixel of the part (a `Cand` is 40),
    // plenty for real frames; flat or noisy cubes with no useful bound (no threshold, or none
    // yet) overflow it and are searched again once the threshold is known
    let cap = cap.unwrap_or((per * w / 5).max(1 << 12));
    let search = PartSearch {
        img,
        stride,
        h,
        w,
        planes,
        band,
        per,
        rmax,
        border: (by, bx),
        test,
        rel,
        abs,
        margin,
        simd,
        relax,
        fused,
    };
    let mut parts: Vec<Part<T>> = (0..nparts)
        .into_par_iter()
        .map(|i| search.run(i, None, cap))
        .collect();
    let mut lo = T::from_f64(f64::INFINITY);
    let mut hi = T::from_f64(f64::NEG_INFINITY);
    for q in &parts {
        if q.lo < lo {
            lo = q.lo;
        }
        if q.hi > hi {
            hi = q.hi;
        }
    }
    if parts.iter().any(|q| q.overflow) {
        if relax.is_some() {
            let mut out = empty(lo, hi);
            out.overflow = true;
            return out;
        }
        if degenerate(lo, hi) {
            return empty(lo, hi);
        }
        let (thr, _, _) = threshold_from((lo, hi), p);
        let again: Vec<(usize, Vec<Cand<T>>)> = (0..nparts)
            .into_par_iter()
            .filter(|&i| parts[i].overflow)
            .map(|i| (i, search.run(i, Some(thr), usize::MAX).cands))
            .collect();
        for (i, c) in again {
            parts[i].cands = c;
        }
    }
    let mut out = empty(lo, hi);
    for q in parts {
        out.cands.extend(q.cands);
        out.spans.extend(q.spans);
    }
    out
}

/// What every part of [`log_peaks_padded`] reads, the same for all of them: the frame (in `A`,
/// rows `stride` apart), the planes, the band and part sizes, and the search's settings (border,
/// thresholds, margin).
struct PartSearch<'a, T, A> {
    img: &'a [A],
    stride: usize,
    h: usize,
    w: usize,
    planes: &'a [(LogKernels, T)],
    /// Rows per step (at least 1).
    band: usize,
    /// Rows per part.
    per: usize,
    /// The widest kernel's radius.
    rmax: usize,
    /// `exclude_border` (rows, columns).
    border: (usize, usize),
    /// Whether any voxel lies outside the border (else nothing is searched).
    test: bool,
    rel: Option<T>,
    abs: Option<T>,
    margin: T,
    simd: Option<Avx2>,
    relax: Option<f64>,
    fused: Option<Fused>,
}

impl<T: Real, A: Real> PartSearch<'_, T, A> {
    /// One part's rows: its maxima above `fixed` (the final threshold, known on a second pass)
    /// or above the provisional lower bound, with at most `cap` kept.
    fn run(&self, i: usize, fixed: Option<T>, cap: usize) -> Part<T> {
        let (h, w, ns) = (self.h, self.w, self.planes.len());
        let (by, bx) = self.border;
        let (ya, yb) = (i * self.per, ((i + 1) * self.per).min(h));
        let mut out = Vec::new();
        let mut spans = Vec::new();
        let mut ext = (T::from_f64(f64::INFINITY), T::from_f64(f64::NEG_INFINITY));
        if ya >= yb {
            return Part {
                cands: out,
                lo: ext.0,
                hi: ext.1,
                spans,
                overflow: false,
            };
        }
        let (c0, c_end) = (ya.saturating_sub(1), (yb + 1).min(h));
        // a ring of `band + 2` rows per plane (no more than the part's rows): cube row `y` at
        // row `(y − c0) mod ring`; the rows of a band overwrite the oldest ones, keeping the
        // two above the band that the 3×3×3 test of its first row still reads
        let band = self.band.min(c_end - c0);
        let ring = band + 2;
        let slab = ring * w;
        let mut buf: Vec<T> = take_buf(ns * slab);
        let mut scratch = LogScratch::<T, A>::new(h, w, self.rmax).with_fused(self.fused);
        let mut sc = RowScratch::default();
        let (mut comp, mut next) = (c0, ya);
        let (mut overflow, mut compacted) = (false, 0);
        while comp < c_end && !(overflow && self.relax.is_some()) {
            let end = comp + band.min(c_end - comp);
            let into = (&mut buf[..], &mut scratch);
            self.compute_rows((comp, end), (c0, ring), into, &mut ext, &mut spans);
            comp = end;
            // rows whose lower neighbour is computed (or is past the frame's end)
            let done = if comp >= h { h } else { comp - 1 }.min(yb);
            if self.test && !overflow {
                let thr = fixed.unwrap_or_else(|| self.provisional_threshold(ext.1));
                let row = (slab, |y: usize| (y - c0) % ring * w);
                let ys = (next.max(by), done.max(next).min(h - by), h);
                let xs = (bx, w - bx, w);
                rows_peaks(
                    self.simd,
                    &buf,
                    row,
                    ys,
                    xs,
                    ns,
                    (thr, self.margin),
                    &mut sc,
                    &mut out,
                );
                if out.len() > cap && out.len() > 2 * compacted {
                    // the bound has risen since: drop what is below it now
                    out.retain(|c| c.v > thr);
                    compacted = out.len();
                    if out.len() > cap {
                        overflow = true;
                        out = Vec::new();
                    }
                }
            }
            next = next.max(done);
        }
        give_buf(buf);
        Part {
            cands: out,
            lo: ext.0,
            hi: ext.1,
            spans,
            overflow,
        }
    }

    /// Cube rows `ys.0..ys.1` of every plane into the ring `buf` (cube row `y` at ring row
    /// `(y − c0) mod ring`), the rows up to the ring's end in one call each; `ext` (lo, hi)
    /// widened to their extrema, and with `relax` every run of rows computed recorded in
    /// `spans`.
    #[inline]
    fn compute_rows(
        &self,
        (comp, end): (usize, usize),
        (c0, ring): (usize, usize),
        (buf, scratch): (&mut [T], &mut LogScratch<T, A>),
        ext: &mut (T, T),
        spans: &mut Vec<Span<T>>,
    ) {
        let (h, w) = (self.h, self.w);
        let slab = ring * w;
        let mut y = comp;
        while y < end {
            // the rows up to the ring's end in one call
            let pos = (y - c0) % ring;
            let m = (ring - pos).min(end - y);
            for (si, (k, sc2)) in self.planes.iter().enumerate() {
                let dst = &mut buf[si * slab + pos * w..si * slab + (pos + m) * w];
                let rows = (y, y + m);
                let (l, u) =
                    log_rows_scaled(self.img, self.stride, h, w, k, scratch, rows, dst, *sc2);
                if l < ext.0 {
                    ext.0 = l;
                }
                if u > ext.1 {
                    ext.1 = u;
                }
                if self.relax.is_some() {
                    spans.push(Span {
                        s: si,
                        rows,
                        lo: l,
                        hi: u,
                    });
                }
            }
            y += m;
        }
    }

    /// The lower bound of the threshold that a band's maxima are kept above while the cube's
    /// maximum is not known yet, from the largest value `hi` seen so far.
    #[inline]
    fn provisional_threshold(&self, hi: T) -> T {
        match self.relax {
            // every maximum the exact cube can have above its threshold:
            // thr ≥ max(abs, rel·hi_exact) and hi_exact ≥ hi − e/2
            Some(e) => {
                let mut base = self.abs.map_or(f64::NEG_INFINITY, T::to_f64);
                if let Some(r) = self.rel {
                    base = base.max(r.to_f64() * (hi.to_f64() - e));
                }
                T::from_f64(base - e)
            }
            None => {
                let mut thr = self.abs.unwrap_or(T::from_f64(f64::NEG_INFINITY));
                if let Some(r) = self.rel
                    && r * hi > thr
                {
                    thr = r * hi;
                }
                thr
            }
        }
    }
}

/// [`log_peaks_banded_in`] of an f32 frame already padded ([`pad_frame`]) with f32 sums and an
/// f32 cube (by the `fused` kernels, or the exact ones), relaxed by `e` (the search of
/// [`super::certified`]), in bands sized for 4-byte values.
pub(super) fn log_peaks_banded_in_f32(
    padded: (&[f32], usize),
    (h, w): (usize, usize),
    planes: &[(LogKernels, f32)],
    p: &BlobLogParams,
    (e, fused, knob): (f64, Option<Fused>, Option<usize>),
) -> Banded<f32> {
    let (band, nparts) = band_split((h, w), (planes.len(), 4), knob);
    let split = (band, nparts, None);
    log_peaks_padded::<f32, f32>(padded, (h, w), planes, p, split, (Some(e), fused))
}

/// The whole f32 cube of [`log_peaks_banded_in_f32`] (f32 sums of the f64 kernels by the
/// `fused` kernels or the exact ones, scales rounded to f32), plane-major: the cube the
/// certified search's bound is about.
#[cfg(test)]
pub(super) fn log_cube_planes_f32(
    image: &[f32],
    (h, w): (usize, usize),
    planes: &[(LogKernels, f64)],
    fused: Option<Fused>,
) -> Vec<f32> {
    let (padded, stride) = pad_frame::<f32, f32>(image, h, w);
    let rmax = planes.iter().map(|(k, _)| k.radius()).max().unwrap_or(0);
    let mut scratch = LogScratch::<f32, f32>::new(h, w, rmax).with_fused(fused);
    let mut cube = vec![0.0f32; planes.len() * h * w];
    for ((k, sc), out) in planes.iter().zip(cube.chunks_mut(h * w)) {
        log_plane_scaled(&padded, stride, h, w, k, &mut scratch, out, *sc as f32);
    }
    cube
}

/// What one part of [`log_peaks_banded`] found: its maxima, its rows' extrema, and whether the
/// maxima overflowed the first pass's cap (then they are dropped, and the part's rows are
/// searched again with the final threshold).
struct Part<T> {
    cands: Vec<Cand<T>>,
    lo: T,
    hi: T,
    spans: Vec<Span<T>>,
    overflow: bool,
}

/// A flat or NaN cube has no peaks (scikit-image: `peak_local_max` of a constant image).
pub(super) fn degenerate<T: Real>(lo: T, hi: T) -> bool {
    lo == hi || lo.is_nan() || hi.is_nan()
}

#[cfg(test)]
mod tests;
