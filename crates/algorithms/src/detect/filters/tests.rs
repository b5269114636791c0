//! Unit tests of [`super`]: the blocked and AVX2 LoG planes against the plain passes.

use super::log_plane::log_plane_with;
use super::*;
use crate::synth::SplitMix;

/// `Lyy + Lxx` by the plain separable passes ([`pass_y`], [`pass_x`]), in `T`.
fn reference<T: Real>(img: &[T], h: usize, w: usize, k: &LogKernels) -> Vec<T> {
    let mut t2 = vec![T::ZERO; h * w];
    let mut t0 = vec![T::ZERO; h * w];
    pass_y(
        img,
        h,
        w,
        &[&k.g2, &k.g0],
        Boundary::Reflect,
        &mut [&mut t2, &mut t0],
    );
    let mut lyy = vec![T::ZERO; h * w];
    let mut lxx = vec![T::ZERO; h * w];
    pass_x(&t2, h, w, &k.g0, Boundary::Reflect, &mut lyy);
    pass_x(&t0, h, w, &k.g2, Boundary::Reflect, &mut lxx);
    lyy.iter().zip(&lxx).map(|(&a, &b)| a + b).collect()
}

/// A random frame with the values of an input type: `u8` and `u16` frames as scikit-image's
/// `img_as_float` gives them (k / 255, k / 65535), `f32` or `f64` uniform values.
fn frame<T: Real>(rng: &mut SplitMix, n: usize, input: &str) -> Vec<T> {
    (0..n)
        .map(|_| {
            let u = rng.uniform();
            T::from_f64(match input {
                "u8" => (u * 256.0).floor().min(255.0) / 255.0,
                "u16" => (u * 65536.0).floor().min(65535.0) / 65535.0,
                "f32" => f64::from(u as f32),
                _ => u,
            })
        })
        .collect()
}

/// The plane of `img` by [`log_plane_with`] (`simd`), accumulated in `A`: `Lyy + Lxx`, or
/// `(−(Lyy + Lxx))·c` for `scaled = Some(c)`.
fn plane<T: Real, A: Real>(
    simd: Option<Avx2>,
    scaled: Option<T>,
    img: &[T],
    h: usize,
    w: usize,
    k: &LogKernels,
) -> (Vec<T>, (T, T)) {
    let stride = padded_stride(w);
    let wide: Vec<f64> = img.iter().map(|v| v.to_f64()).collect();
    let padded: Vec<A> = pad_stride(&wide, h, w, stride)
        .iter()
        .map(|&v| A::from_f64(v))
        .collect();
    let mut s = LogScratch::<T, A>::new(h, w, 2);
    let mut out = vec![T::ZERO; h * w];
    let f = move |a: T, b: T| match scaled {
        Some(c) => (-(a + b)) * c,
        None => a + b,
    };
    let ext = log_plane_with(
        simd,
        &padded,
        stride,
        h,
        w,
        k,
        &mut s,
        (0, h),
        &mut out,
        f,
        scaled,
    );
    (out, ext)
}

fn check<T: Real>(rng: &mut SplitMix, h: usize, w: usize, sigma: f64) {
    let img: Vec<T> = frame(rng, h * w, "f64");
    let k = LogKernels::new(sigma, T::IS_F32);
    let want = reference(&img, h, w, &k);
    let (out, (lo, hi)) = plane::<T, f64>(Avx2::detect(), None, &img, h, w, &k);
    for (i, (a, b)) in out.iter().zip(&want).enumerate() {
        assert!(
            a.to_f64().to_bits() == b.to_f64().to_bits(),
            "{h}x{w} σ {sigma}: pixel {i}: {} vs {}",
            a.to_f64(),
            b.to_f64()
        );
    }
    let min = want
        .iter()
        .map(|v| v.to_f64())
        .fold(f64::INFINITY, f64::min);
    let max = want
        .iter()
        .map(|v| v.to_f64())
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!((lo.to_f64(), hi.to_f64()), (min, max), "{h}x{w} σ {sigma}");
}

/// Bit-identical planes and extrema from both paths.
fn same_planes<T: Real, A: Real>(
    simd: Avx2,
    img: &[T],
    (h, w): (usize, usize),
    k: &LogKernels,
    what: &str,
) {
    // the plain sum, and the cube's combine with σ² = 2.25 (fused on the AVX2 path)
    for scaled in [None, Some(T::from_f64(2.25))] {
        let (a, ea) = plane::<T, A>(Some(simd), scaled, img, h, w, k);
        let (b, eb) = plane::<T, A>(None, scaled, img, h, w, k);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                x.to_f64().to_bits() == y.to_f64().to_bits(),
                "{what} {scaled:?}: pixel {i}: AVX2 {} vs generic {}",
                x.to_f64(),
                y.to_f64()
            );
        }
        assert_eq!(
            (ea.0.to_f64().to_bits(), ea.1.to_f64().to_bits()),
            (eb.0.to_f64().to_bits(), eb.1.to_f64().to_bits()),
            "{what} {scaled:?}: extrema"
        );
    }
}

/// The explicit AVX2 kernels give the generic code's planes bit for bit (the generic path
/// is `log_plane_with(None, …)`, so both run in one test on an AVX2 machine), on random
/// frames of u8, u16, f32 and f64 values, in f64 and f32 working types and with f32
/// accumulation (the f32 kernels: 8 lanes), with every radius 0…12 and 24 and awkward
/// sizes: widths around the vector (4, 8), register-block (16, 32) and strip (64, 128)
/// sizes, frames smaller than the kernel (reflected more than once) and than a row block.
#[test]
fn avx2_planes_equal_the_generic_ones() {
    let Some(simd) = Avx2::detect() else {
        eprintln!("no AVX2 on this CPU: only the generic path exists here");
        return;
    };
    let mut rng = SplitMix::new(23);
    let sigmas: Vec<f64> = std::iter::once(0.1)
        .chain((1..=12).map(|r| f64::from(r) / 4.0))
        .chain([6.0])
        .collect();
    let sizes = [
        (1, 1),
        (1, 5),
        (2, 3),
        (3, 17),
        (5, 4),
        (7, 19),
        (8, 16),
        (9, 33),
        (13, 63),
        (17, 65),
        (24, 67),
        (31, 131),
    ];
    for (n, &(h, w)) in sizes.iter().enumerate() {
        for &sigma in &sigmas {
            let input = ["u8", "u16", "f32", "f64"][(n + (4.0 * sigma) as usize) % 4];
            let what = format!("{h}x{w} σ {sigma} {input}");
            let img64: Vec<f64> = frame(&mut rng, h * w, input);
            let k64 = LogKernels::new(sigma, false);
            same_planes::<f64, f64>(simd, &img64, (h, w), &k64, &what);
            let img32: Vec<f32> = img64.iter().map(|&v| v as f32).collect();
            let k32 = LogKernels::new(sigma, true);
            same_planes::<f32, f64>(simd, &img32, (h, w), &k32, &what);
            same_planes::<f32, f32>(simd, &img32, (h, w), &k32, &what);
        }
    }
}

/// The blocked passes (rows in blocks of `BLOCK_ROWS`, columns in `LANES`, padding in
/// place) give the plain passes' values bit for bit, and the plane's extrema, on random
/// frames of every shape class: fewer rows than a block or than the radius (reflected more
/// than once), widths around the lane and strip sizes.
#[test]
fn blocked_log_plane_equals_the_plain_passes() {
    let mut rng = SplitMix::new(19);
    for h in [1, 2, 5, 8, 9, 17, 33] {
        for w in [1, 3, 4, 5, 15, 16, 17, 21, 64, 67, 130] {
            for sigma in [0.7, 1.5, 3.0, 6.0] {
                check::<f64>(&mut rng, h, w, sigma);
                check::<f32>(&mut rng, h, w, sigma);
            }
        }
    }
}

/// Any band of rows of a plane (`log_rows_scaled`) equals those rows of the whole plane bit
/// for bit, with the band's own extrema: bands starting and ending inside a row block,
/// within the kernel radius of an edge, single rows, and empty bands.
#[test]
fn bands_of_rows_equal_the_rows_of_the_plane() {
    let mut rng = SplitMix::new(29);
    for (h, w) in [(1, 7), (5, 17), (23, 37), (40, 70)] {
        let img: Vec<f64> = frame(&mut rng, h * w, "u8");
        let stride = padded_stride(w);
        let padded = pad_stride(&img, h, w, stride);
        for sigma in [0.5, 1.5, 3.0] {
            let k = LogKernels::new(sigma, false);
            let c = sigma * sigma;
            let mut s = LogScratch::<f64, f64>::new(h, w, k.radius());
            let mut plane = vec![0.0; h * w];
            log_plane_scaled(&padded, stride, h, w, &k, &mut s, &mut plane, c);
            let cuts = [0, 1, 3, 8, 9, 16, 21, h / 2, h - 1, h];
            for &a in &cuts {
                for &b in &cuts {
                    let (a, b) = (a.min(h), b.min(h));
                    if a > b {
                        continue;
                    }
                    let mut band = vec![f64::NAN; (b - a) * w];
                    let (lo, hi) =
                        log_rows_scaled(&padded, stride, h, w, &k, &mut s, (a, b), &mut band, c);
                    let want = &plane[a * w..b * w];
                    assert!(
                        band.iter()
                            .zip(want)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{h}x{w} σ {sigma} rows {a}..{b}"
                    );
                    if a < b {
                        let wl = want.iter().copied().fold(f64::INFINITY, f64::min);
                        let wh = want.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        assert_eq!((lo, hi), (wl, wh), "{h}x{w} σ {sigma} rows {a}..{b}");
                    }
                }
            }
        }
    }
}

/// The tall y kernels (strips of one vector, four output rows at a time: for wide kernels)
/// give the strip kernels' values bit for bit: every fused kernel set, radii from 1 to past the
/// frame's height (rows reflected more than once), widths around the vector and strip sizes,
/// row ranges that are not whole blocks of four.
#[test]
fn tall_y_passes_equal_the_strips() {
    use super::avx2::{y_offsets, y_rows_fma8, y_rows_fma16, y_tall_fma8, y_tall_fma16};
    use super::fused::{Fma8, Fma16};
    let mut rng = SplitMix::new(41);
    let mut checked = 0;
    for fused in Fused::available() {
        for (h, w) in [(1, 7), (5, 16), (9, 33), (23, 64), (40, 259), (70, 17)] {
            let stride = padded_stride(w);
            let img: Vec<f32> = (0..h * stride).map(|_| rng.uniform() as f32).collect();
            for r in [1usize, 3, 8, 21, 60] {
                let g2: Vec<f32> = (0..=r).map(|_| rng.uniform() as f32 - 0.5).collect();
                let g0: Vec<f32> = (0..=r).map(|_| rng.uniform() as f32).collect();
                for (y0, y1) in [(0, h), (h / 3, h), (h / 2, (h / 2 + 5).min(h))] {
                    let n = (y1 - y0) * (w + 2 * r);
                    let (mut a2, mut a0) = (vec![0f32; n], vec![0f32; n]);
                    let (mut b2, mut b0) = (vec![0f32; n], vec![0f32; n]);
                    let offs = y_offsets(&img, (stride, h, w), (y0, y1), (&g2, &g0), (&a2, &a0));
                    let g = (&g2[..], &g0[..]);
                    // SAFETY: the instruction sets are present (`Fused::available`); the
                    // geometry is checked by `y_offsets`.
                    unsafe {
                        match fused {
                            Fused::Fma8 => {
                                y_rows_fma8::<Fma8, false>(
                                    &img,
                                    stride,
                                    w,
                                    (y0, y1),
                                    g,
                                    &offs,
                                    &mut a2,
                                    &mut a0,
                                );
                                y_tall_fma8::<Fma8, false>(
                                    &img,
                                    stride,
                                    w,
                                    (y0, y1),
                                    g,
                                    &offs,
                                    &mut b2,
                                    &mut b0,
                                );
                            }
                            Fused::Fma16 => {
                                y_rows_fma16::<Fma16, false>(
                                    &img,
                                    stride,
                                    w,
                                    (y0, y1),
                                    g,
                                    &offs,
                                    &mut a2,
                                    &mut a0,
                                );
                                y_tall_fma16::<Fma16, false>(
                                    &img,
                                    stride,
                                    w,
                                    (y0, y1),
                                    g,
                                    &offs,
                                    &mut b2,
                                    &mut b0,
                                );
                            }
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    let what = format!("{fused:?} {h}x{w} r {r} rows {y0}..{y1}");
                    assert_eq!(bits(&a2), bits(&b2), "{what}: g2");
                    assert_eq!(bits(&a0), bits(&b0), "{what}: g0");
                    checked += 1;
                }
            }
        }
    }
    eprintln!("{checked} tall y passes, all the strips' values");
}
