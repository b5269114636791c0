//! The n-D scale space: `cube[s] = −gaussian_laplace(image, σ_s) · mean(σ_s)**2` with SciPy's
//! passes and roundings.
//!
//! `scipy.ndimage.gaussian_laplace` is `generic_laplace`: the output (working type) first holds
//! `L_0`, then `L_a` (a new array of the working type) is added to it for `a = 1 … n−1`; `L_a`
//! is `gaussian_filter` with order 2 on axis `a` and 0 elsewhere, i.e. one `correlate1d` pass
//! per axis in axis order, each stored in the working type. A pass sums in f64 in SciPy's order
//! (centre tap, then the mirrored pairs from the outermost inwards) with `reflect` edges.
//!
//! The passes shared by several `L_a` are computed once: `L_a = G_{n−1} ⋯ G_{a+1} D_a Q_a` with
//! `Q_a = G_{a−1} ⋯ G_0 image` (`G` the Gaussian pass, `D` the second derivative), 8 passes per
//! scale in 3-D instead of 9. Every intermediate is held in f64 rounded to the working type
//! (exactly the value SciPy stores). The last pass of each `L_a` is along the last axis and
//! writes (or adds) straight into the cube plane.
//!
//! Passes along an outer axis (`inner > 1` elements per step) are vectorised along the
//! contiguous inner elements in blocks of 32 (f64) or 64 (f32) lanes, several registers of
//! independent sums in flight (then blocks of 16, then single columns), over strips of columns
//! so that the lines a strip reads stay in cache; passes along the last axis pad each line and
//! vectorise over its outputs the same way. Both run on all threads, compiled for AVX-512F or
//! AVX2 where the CPU has it.
//!
//! The passes are generic over their sum type `A`: f64 for the cube itself (SciPy's sums), f32
//! for the certified search's approximate cube (`nd/certified.rs`), the same code.

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use crate::detect::filters::Avx2;
use crate::detect::filters::{Boundary, LogKernels, map_index};
use crate::detect::real::Real;

/// Columns of a strip of an outer-axis pass (2 KiB of f64 per line).
const STRIP: usize = 256;

/// A pass along one axis of a C-order array: `outer` blocks of `len` steps of `inner`
/// contiguous elements.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geo {
    pub(super) outer: usize,
    pub(super) len: usize,
    pub(super) inner: usize,
}

impl Geo {
    /// The geometry of axis `axis` of `dims`.
    pub(super) fn of(dims: &[usize], axis: usize) -> Self {
        Geo {
            outer: dims[..axis].iter().product(),
            len: dims[axis],
            inner: dims[axis + 1..].iter().product(),
        }
    }
}

/// The widest vectors the CPU gives the passes: their loops are generic Rust, compiled again
/// inside a function with AVX-512F or AVX2 enabled ([`simd_fn`]), where they vectorise with
/// 512- or 256-bit vectors: the same IEEE operations lane by lane, so the same values (Rust
/// never contracts `a * b + c` into an FMA). A closure handed to such a function would not do:
/// it stays a function of its own, compiled for the baseline (SSE2).
///
/// A proof of what the CPU has: made only by [`Simd::detect`] (its field is private), so the
/// target-feature calls of [`simd_fn`] are sound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Simd(Level);

/// The vectors of a [`Simd`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(super) enum Level {
    /// AVX-512F (with AVX2).
    Avx512,
    /// AVX2.
    Avx2,
    /// The baseline.
    Plain,
}

impl Simd {
    /// What this CPU has.
    pub(super) fn detect() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Simd(Level::Avx512);
            }
            if Avx2::detect().is_some() {
                return Simd(Level::Avx2);
            }
        }
        Simd(Level::Plain)
    }

    /// Its vectors.
    pub(super) fn level(self) -> Level {
        self.0
    }
}

/// `$name::<generics>(simd, args…)` calls the `#[inline(always)]` function `$body` compiled for
/// the widest vectors of `simd` ([`Simd`]).
macro_rules! simd_fn {
    ($(#[$doc:meta])* $name:ident, $body:ident, <$($g:ident $(: $b:path)?),*>,
     ($($arg:ident: $ty:ty),*)) => {
        $(#[$doc])*
        #[allow(clippy::too_many_arguments)]
        pub(super) fn $name<$($g $(: $b)?),*>(simd: Simd, $($arg: $ty),*) {
            /// # Safety
            /// The CPU must have AVX-512F.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2")]
            unsafe fn wide<$($g $(: $b)?),*>($($arg: $ty),*) {
                $body::<$($g),*>($($arg),*)
            }
            /// # Safety
            /// The CPU must have AVX2.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            unsafe fn avx2<$($g $(: $b)?),*>($($arg: $ty),*) {
                $body::<$($g),*>($($arg),*)
            }
            match simd.level() {
                // SAFETY: `Simd::detect`, the only maker of a `Simd`, found AVX-512F (and
                // AVX2) on this CPU.
                #[cfg(target_arch = "x86_64")]
                $crate::detect::blob_log::nd::laplace::Level::Avx512 => unsafe {
                    wide::<$($g),*>($($arg),*)
                },
                // SAFETY: `Simd::detect`, the only maker of a `Simd`, found AVX2 on this CPU.
                #[cfg(target_arch = "x86_64")]
                $crate::detect::blob_log::nd::laplace::Level::Avx2 => unsafe {
                    avx2::<$($g),*>($($arg),*)
                },
                _ => $body::<$($g),*>($($arg),*),
            }
        }
    };
}
pub(super) use simd_fn;

/// `v` (a sum in `A`) rounded to the working type `T` and held in `A`: SciPy's store of a pass
/// output when `A = f64`; nothing when `A = T = f32` (the f32 cube of the certified search,
/// whose sums are f32 already).
#[inline(always)]
fn round<T: Real, A: Real>(v: A) -> A {
    A::from_f64(T::from_f64(v.to_f64()).to_f64())
}

/// SciPy `reflect` index of `j` on a line of `n`.
#[inline(always)]
fn reflect(j: isize, n: usize) -> usize {
    map_index(j, n, Boundary::Reflect).unwrap_or(0)
}

/// Rows (steps of `inner` elements, `outer · len` in all) per parallel task: about four tasks
/// per thread, at least `min_elems / inner` rows.
fn rows_per_task(rows: usize, inner: usize, min_elems: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    rows.div_ceil(4 * threads)
        .max(min_elems.div_ceil(inner.max(1)))
        .max(1)
}

/// One correlation pass with the symmetric kernel `half` (taps `0..=r`) along an axis with
/// `inner > 1`: `dst` (rounded to `T`) from `src`, both laid out as `g`, summed in `A`.
pub(super) fn pass_outer<T: Real, A: Real>(src: &[A], dst: &mut [A], g: Geo, half: &[A]) {
    let rb = rows_per_task(g.outer * g.len, g.inner, 1 << 14);
    let simd = Simd::detect();
    dst.par_chunks_mut(rb * g.inner)
        .enumerate()
        .for_each(|(c, out)| outer_rows_simd::<T, A>(simd, src, g, c * rb, half, out));
}

simd_fn!(
    /// [`outer_rows`] compiled for `simd`.
    outer_rows_simd,
    outer_rows,
    <T: Real, A: Real>,
    (src: &[A], g: Geo, t0: usize, half: &[A], out: &mut [A])
);

/// Rows `t0 ..` (row `t` = step `t mod len` of block `t / len`) of [`pass_outer`] into `out`.
#[inline(always)]
fn outer_rows<T: Real, A: Real>(src: &[A], g: Geo, t0: usize, half: &[A], out: &mut [A]) {
    let (len, inner) = (g.len, g.inner);
    let r = half.len() - 1;
    let rows = out.len() / inner;
    // line offsets of the taps 1..=r above and below the current step
    let mut up = vec![0usize; r + 1];
    let mut dn = vec![0usize; r + 1];
    let mut cs = 0;
    while cs < inner {
        let ce = (cs + STRIP).min(inner);
        for dt in 0..rows {
            let t = t0 + dt;
            let (base, i) = ((t / len) * len * inner, t % len);
            for j in 1..=r {
                up[j] = base + reflect(i as isize - j as isize, len) * inner;
                dn[j] = base + reflect((i + j) as isize, len) * inner;
            }
            let c = base + i * inner;
            let orow = &mut out[dt * inner..(dt + 1) * inner];
            // wide blocks first (independent sums in flight: 4 vectors of the widest registers),
            // then blocks of 16, then single columns
            let mut k = cs;
            if std::mem::size_of::<A>() == 4 {
                k = outer_blocks::<T, A, 64>(src, (c, &up, &dn), half, (k, ce), orow);
            } else {
                k = outer_blocks::<T, A, 32>(src, (c, &up, &dn), half, (k, ce), orow);
            }
            k = outer_blocks::<T, A, 16>(src, (c, &up, &dn), half, (k, ce), orow);
            outer_blocks::<T, A, 1>(src, (c, &up, &dn), half, (k, ce), orow);
        }
        cs = ce;
    }
}

/// Columns `k .. ce` of one output row of [`outer_rows`] in blocks of `B` (as many as fit),
/// from the centre line `c` and the tap lines `up[j]`, `dn[j]` of `src`; returns the first
/// column not done.
#[inline(always)]
fn outer_blocks<T: Real, A: Real, const B: usize>(
    src: &[A],
    (c, up, dn): (usize, &[usize], &[usize]),
    half: &[A],
    (mut k, ce): (usize, usize),
    orow: &mut [A],
) -> usize {
    let r = half.len() - 1;
    while k + B <= ce {
        let mut acc = [A::ZERO; B];
        for (a, &v) in acc.iter_mut().zip(&src[c + k..c + k + B]) {
            *a = v * half[0];
        }
        for j in (1..=r).rev() {
            let wj = half[j];
            let u = &src[up[j] + k..up[j] + k + B];
            let d = &src[dn[j] + k..dn[j] + k + B];
            for ((a, &x), &y) in acc.iter_mut().zip(u).zip(d) {
                *a = *a + (x + y) * wj;
            }
        }
        for (o, &a) in orow[k..k + B].iter_mut().zip(&acc) {
            *o = round::<T, A>(a);
        }
        k += B;
    }
    k
}

/// One correlation pass with the symmetric kernel `half` along the last axis (lines of `len`
/// contiguous elements): `emit(out, sum)` gets every output's sum in `A` (it rounds and stores
/// or adds).
pub(super) fn pass_last<A: Real, O: Send>(
    src: &[A],
    len: usize,
    half: &[A],
    out: &mut [O],
    emit: impl Fn(&mut O, A) + Sync,
) {
    let lines = out.len() / len;
    let lb = rows_per_task(lines, len, 1 << 14);
    let simd = Simd::detect();
    out.par_chunks_mut(lb * len)
        .enumerate()
        .for_each(|(c, out)| {
            last_lines_simd(simd, &src[c * lb * len..], len, half, out, &emit);
        });
}

simd_fn!(
    /// [`last_lines`] compiled for `simd`.
    last_lines_simd,
    last_lines,
    <A: Real, O, F: Fn(&mut O, A)>,
    (src: &[A], len: usize, half: &[A], out: &mut [O], emit: &F)
);

/// The lines of `out` (from the start of `src`) of [`pass_last`].
#[inline(always)]
fn last_lines<A: Real, O, F: Fn(&mut O, A)>(
    src: &[A],
    len: usize,
    half: &[A],
    out: &mut [O],
    emit: &F,
) {
    let r = half.len() - 1;
    let mut buf = vec![A::ZERO; len + 2 * r];
    for (line, oline) in src.chunks(len).zip(out.chunks_mut(len)) {
        buf[r..r + len].copy_from_slice(line);
        for k in 0..r {
            buf[k] = line[reflect(k as isize - r as isize, len)];
            buf[r + len + k] = line[reflect((len + k) as isize, len)];
        }
        let mut k = 0;
        if std::mem::size_of::<A>() == 4 {
            k = last_blocks::<A, O, F, 64>(&buf, half, (k, len), oline, emit);
        } else {
            k = last_blocks::<A, O, F, 32>(&buf, half, (k, len), oline, emit);
        }
        k = last_blocks::<A, O, F, 16>(&buf, half, (k, len), oline, emit);
        last_blocks::<A, O, F, 1>(&buf, half, (k, len), oline, emit);
    }
}

/// Outputs `k .. len` of one line of [`last_lines`] in blocks of `B` (as many as fit), from the
/// padded line `buf`; returns the first output not done.
#[inline(always)]
fn last_blocks<A: Real, O, F: Fn(&mut O, A), const B: usize>(
    buf: &[A],
    half: &[A],
    (mut k, len): (usize, usize),
    oline: &mut [O],
    emit: &F,
) -> usize {
    let r = half.len() - 1;
    while k + B <= len {
        let mut acc = [A::ZERO; B];
        for (a, &v) in acc.iter_mut().zip(&buf[r + k..r + k + B]) {
            *a = v * half[0];
        }
        for j in (1..=r).rev() {
            let wj = half[j];
            let u = &buf[r + k - j..r + k - j + B];
            let d = &buf[r + k + j..r + k + j + B];
            for ((a, &x), &y) in acc.iter_mut().zip(u).zip(d) {
                *a = *a + (x + y) * wj;
            }
        }
        for (o, &a) in oline[k..k + B].iter_mut().zip(&acc) {
            emit(o, a);
        }
        k += B;
    }
    k
}

/// The half kernels of one axis in the sum type `A`: the Gaussian (`g0`) and its second
/// derivative (`g2`), taps `0..=r`.
#[derive(Debug, Clone)]
pub(super) struct Halves<A> {
    pub(super) g0: Vec<A>,
    pub(super) g2: Vec<A>,
}

impl<A: Real> Halves<A> {
    /// The taps of `k` rounded to `A` (exact for f64).
    pub(super) fn of(k: &LogKernels) -> Self {
        let conv = |h: &[f64]| h.iter().map(|&t| A::from_f64(t)).collect();
        Halves {
            g0: conv(&k.g0),
            g2: conv(&k.g2),
        }
    }
}

/// Work buffers of [`log_plane_nd`]: four volumes of the sum type `A`.
pub(super) struct Work<A> {
    q: Vec<A>,
    qn: Vec<A>,
    d1: Vec<A>,
    d2: Vec<A>,
}

impl<A: Real> Work<A> {
    /// Buffers for `n` voxels (those an image with one axis does not use stay empty).
    pub(super) fn new(n: usize, ndim: usize) -> Self {
        let n = if ndim > 1 { n } else { 0 };
        Work {
            q: vec![A::ZERO; n],
            qn: vec![A::ZERO; n],
            d1: vec![A::ZERO; n],
            d2: vec![A::ZERO; n],
        }
    }
}

/// One plane of the cube: `plane = −gaussian_laplace(img, σ) · scale` in `T`, with the kernels
/// `kernels[a]` of axis `a` (σ of that axis), every pass summed in `A` (f64: SciPy's sums;
/// f32 with `T = f32`: the certified search's f32 cube). `img` holds the image's values in `A`,
/// C order, shape `dims`.
pub(super) fn log_plane_nd<T: Real, A: Real>(
    img: &[A],
    dims: &[usize],
    kernels: &[Halves<A>],
    scale: T,
    work: &mut Work<A>,
    plane: &mut [T],
) {
    let n = dims.len();
    let last = dims[n - 1];
    let store = |o: &mut T, a: A| *o = T::from_f64(a.to_f64());
    let add = |o: &mut T, a: A| *o = *o + T::from_f64(a.to_f64());
    // Q_a: `img` for a = 0, then `work.q`
    let mut q_is_img = true;
    for a in 0..n {
        let q: &[A] = if q_is_img { img } else { &work.q };
        if a == n - 1 {
            if a == 0 {
                pass_last(q, last, &kernels[a].g2, plane, store);
            } else {
                pass_last(q, last, &kernels[a].g2, plane, add);
            }
            break;
        }
        // D_a Q_a, then the Gaussian on axes a+1 .. n−2, then the last axis into the plane
        pass_outer::<T, A>(q, &mut work.d1, Geo::of(dims, a), &kernels[a].g2);
        for (b, k) in kernels.iter().enumerate().take(n - 1).skip(a + 1) {
            pass_outer::<T, A>(&work.d1, &mut work.d2, Geo::of(dims, b), &k.g0);
            std::mem::swap(&mut work.d1, &mut work.d2);
        }
        if a == 0 {
            pass_last(&work.d1, last, &kernels[n - 1].g0, plane, store);
        } else {
            pass_last(&work.d1, last, &kernels[n - 1].g0, plane, add);
        }
        // Q_{a+1} = G_a Q_a
        let q: &[A] = if q_is_img { img } else { &work.q };
        pass_outer::<T, A>(q, &mut work.qn, Geo::of(dims, a), &kernels[a].g0);
        std::mem::swap(&mut work.q, &mut work.qn);
        q_is_img = false;
    }
    // `-L * mean(σ)**2`: the negation is exact
    plane.par_chunks_mut(1 << 16).for_each(|c| {
        for v in c {
            *v = -*v * scale;
        }
    });
}

/// The minimum and maximum of `values` (`(0, 0)` when empty).
pub(super) fn extrema<T: Real>(values: &[T]) -> (T, T) {
    values
        .par_chunks(1 << 16)
        .map(|c| {
            c.iter().fold((c[0], c[0]), |(lo, hi), &v| {
                (if v < lo { v } else { lo }, if v > hi { v } else { hi })
            })
        })
        .reduce_with(|a, b| {
            (
                if b.0 < a.0 { b.0 } else { a.0 },
                if b.1 > a.1 { b.1 } else { a.1 },
            )
        })
        .unwrap_or((T::ZERO, T::ZERO))
}

/// The whole cube, plane-major (`cube[s·N + voxel]`), and its minimum and maximum.
pub(super) fn log_cube_nd<T: Real>(
    img: &[f64],
    dims: &[usize],
    sigmas: &[Vec<T>],
    scales: &[T],
) -> (Vec<T>, T, T) {
    let nvox: usize = dims.iter().product();
    let mut cube = vec![T::ZERO; nvox * sigmas.len()];
    let mut work = Work::new(nvox, dims.len());
    for ((row, &scale), plane) in sigmas.iter().zip(scales).zip(cube.chunks_mut(nvox)) {
        let kernels: Vec<Halves<f64>> = row
            .iter()
            .map(|s| Halves::of(&LogKernels::new(s.to_f64(), T::IS_F32)))
            .collect();
        log_plane_nd(img, dims, &kernels, scale, &mut work, plane);
    }
    drop(work);
    let (lo, hi) = extrema(&cube);
    (cube, lo, hi)
}
