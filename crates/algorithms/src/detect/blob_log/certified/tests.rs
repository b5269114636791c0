#![allow(clippy::unwrap_used)]
use super::*;
use crate::detect::blob_log::scale_space::log_peaks_banded;
use crate::detect::blob_log::{Precision, log_cube};
use crate::synth::SplitMix;

/// [`ExactVoxels`] gives every voxel of the f64 cube bit for bit (frames smaller than the
/// kernels included: reflected more than once).
#[test]
fn exact_voxels_equal_the_cube() {
    let mut rng = SplitMix::new(5);
    for (h, w) in [(1, 1), (3, 7), (9, 4), (20, 33)] {
        let img: Vec<f64> = (0..h * w).map(|_| rng.uniform()).collect();
        let p = BlobLogParams {
            max_sigma: 3.0,
            num_sigma: 4,
            ..BlobLogParams::default()
        };
        let sigmas = p.sigma_list::<f64>();
        let cube = log_cube(&img, h, w, &sigmas).unwrap();
        let planes = exact_planes(&sigmas);
        let mut ex = ExactVoxels::new(&img, (h, w), &planes, Reference::F64);
        for s in 0..sigmas.len() {
            for y in 0..h {
                for x in 0..w {
                    let want = cube[s * h * w + y * w + x];
                    assert_eq!(ex.compute(s, y, x).to_bits(), want.to_bits(), "{h}x{w}");
                }
            }
        }
        // an f32 frame: its f32 cube (each pass rounded to f32)
        let img32: Vec<f32> = img.iter().map(|&v| v as f32).collect();
        let sig32 = p.sigma_list::<f32>();
        let cube = log_cube(&img32, h, w, &sig32).unwrap();
        let img = widen(&img32);
        let planes = f32_planes(&sig32);
        let mut ex = ExactVoxels::new(&img, (h, w), &planes, Reference::F32);
        for s in 0..sig32.len() {
            for y in 0..h {
                for x in 0..w {
                    let want = f64::from(cube[s * h * w + y * w + x]);
                    assert_eq!(ex.compute(s, y, x).to_bits(), want.to_bits(), "{h}x{w}");
                }
            }
        }
    }
}

/// f32 values held in f64.
fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// The planes of the f32 cube of an f32 frame, the scale held in f64.
fn f32_planes(sig32: &[f32]) -> Vec<(LogKernels, f64)> {
    exact_planes(sig32)
        .into_iter()
        .map(|(k, sc)| (k, f64::from(sc)))
        .collect()
}

/// The f32 cube is within the bound of the f64 one, with room: the bound is not
/// violated on random frames, and not so loose that it is useless (at most 10⁴ times the
/// largest error seen).
#[test]
fn the_bound_holds_with_room() {
    let mut rng = SplitMix::new(8);
    let (h, w) = (40, 50);
    for scale in [1.0, 1e-3, 300.0] {
        let img: Vec<f64> = (0..h * w).map(|_| rng.uniform() * scale).collect();
        let p = BlobLogParams {
            max_sigma: 6.0,
            num_sigma: 6,
            ..BlobLogParams::default()
        };
        let sigmas = p.sigma_list::<f64>();
        let exact = log_cube(&img, h, w, &sigmas).unwrap();
        let img32: Vec<f32> = img.iter().map(|&v| v as f32).collect();
        let planes = exact_planes(&sigmas);
        let m = img.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        // an f32 frame: f32 sums against SciPy's f32 cube (passes rounded to f32)
        let sig32 = p.sigma_list::<f32>();
        let exact32: Vec<f64> = widen(&log_cube(&img32, h, w, &sig32).unwrap());
        let planes32 = f32_planes(&sig32);
        for fused in kernel_choices() {
            for (reference, exact, planes) in [
                (Reference::F64, &exact, &planes),
                (Reference::F32, &exact32, &planes32),
            ] {
                let approx = crate::detect::blob_log::scale_space::log_cube_planes_f32(
                    &img32,
                    (h, w),
                    planes,
                    fused,
                );
                let b = error_bound(planes, m, reference);
                let worst = exact
                    .iter()
                    .zip(&approx)
                    .map(|(a, b)| (a - f64::from(*b)).abs())
                    .fold(0.0, f64::max);
                let what = format!("{reference:?} {fused:?} scale {scale}");
                assert!(worst <= b, "{what}: error {worst} > bound {b}");
                assert!(worst * 1e4 > b, "{what}: bound {b} for error {worst}");
            }
        }
    }
}

/// The f32 kernels of the certified search: the exact ones and every fused set the CPU
/// has.
fn kernel_choices() -> Vec<Option<Fused>> {
    std::iter::once(None)
        .chain(Fused::available().into_iter().map(Some))
        .collect()
}

/// A u8 frame as a microscope gives it: bright Gaussian spots of σ 1–3 on a dim
/// background with Poisson-like noise and a few saturated spots, as `img_as_float` scales
/// it (k / 255).
fn blobs(rng: &mut SplitMix, h: usize, w: usize) -> Vec<f64> {
    let spots: Vec<(f64, f64, f64, f64)> = (0..(h * w / 150).max(1))
        .map(|_| {
            (
                rng.uniform() * h as f64,
                rng.uniform() * w as f64,
                1.0 + 2.0 * rng.uniform(),
                60.0 + 400.0 * rng.uniform(),
            )
        })
        .collect();
    (0..h * w)
        .map(|i| {
            let (y, x) = ((i / w) as f64, (i % w) as f64);
            let mut v = 20.0;
            for &(sy, sx, s, a) in &spots {
                let d2 = (y - sy).powi(2) + (x - sx).powi(2);
                v += a * (-d2 / (2.0 * s * s)).exp();
            }
            let noisy = v + v.sqrt() * (rng.uniform() - 0.5) * 3.4;
            noisy.round().clamp(0.0, 255.0) / 255.0
        })
        .collect()
}

/// The banded search of the `reference` cube of `img` (an f32 frame of its values rounded
/// to f32 for [`Reference::F32`]): the maxima above the threshold and the extrema, held in
/// f64, with the σ list and the frame the certified search gets.
#[allow(clippy::type_complexity)]
fn reference_search(
    img: &[f64],
    (h, w): (usize, usize),
    p: &BlobLogParams,
    reference: Reference,
) -> (Vec<Cand<f64>>, f64, f64, Vec<f64>, Vec<f64>) {
    match reference {
        Reference::F64 => {
            let sigmas = p.sigma_list::<f64>();
            let (c, lo, hi) = log_peaks_banded(img, h, w, &sigmas, (Precision::F64, None), p);
            let (thr, _, _) = threshold_from((lo, hi), p);
            let c = c.into_iter().filter(|c| c.v > thr).collect();
            (c, lo, hi, sigmas, img.to_vec())
        }
        Reference::F32 => {
            let img32: Vec<f32> = img.iter().map(|&v| v as f32).collect();
            let sig32 = p.sigma_list::<f32>();
            let (c, lo, hi) = log_peaks_banded(&img32, h, w, &sig32, (Precision::F64, None), p);
            let (thr, _, _) = threshold_from((lo, hi), p);
            let c = c
                .iter()
                .filter(|c| c.v > thr)
                .map(|c| c.map(f64::from))
                .collect();
            (
                c,
                f64::from(lo),
                f64::from(hi),
                widen(&sig32),
                widen(&img32),
            )
        }
    }
}

/// The certified search gives the f64 banded search's maxima (positions, scales and
/// responses bit for bit) and extrema, or declines: on random frames of 256 levels, of
/// 3 levels (plateaus and exact ties everywhere), of u16-like values, on microscope-like
/// frames of spots with saturation, with relative and absolute thresholds and borders,
/// from one row to more rows than a band (several parts); and it declines where it must
/// (no threshold, zeros). The same for f32 frames against their f32 cube.
#[test]
fn certified_search_equals_the_exact_one() {
    let mut rng = SplitMix::new(77);
    let (mut compared, mut declined, mut maxima, mut largest) = (0, 0, 0, 0);
    let mut compared32 = 0;
    // (300, 260): thousands of open candidates, settled in parallel chunks
    for (h, w) in [
        (1, 1),
        (5, 3),
        (13, 21),
        (40, 37),
        (67, 90),
        (150, 131),
        (300, 260),
    ] {
        for levels in [3.0, 256.0, 65536.0, 0.0] {
            let img: Vec<f64> = if levels == 0.0 {
                blobs(&mut rng, h, w)
            } else {
                (0..h * w)
                    .map(|_| (rng.uniform() * levels).floor() / (levels - 1.0))
                    .collect()
            };
            for (threshold, threshold_rel, exclude_border) in [
                (None, Some(0.2), (0, 0)),
                (Some(0.01), None, (0, 0)),
                (Some(0.02), Some(0.3), (2, 3)),
                (None, Some(0.0), (0, 0)),
                (Some(-1.0), None, (0, 0)),
            ] {
                let p = BlobLogParams {
                    max_sigma: 3.0,
                    num_sigma: 5,
                    threshold,
                    threshold_rel,
                    exclude_border,
                    ..BlobLogParams::default()
                };
                for (reference, fused) in [Reference::F64, Reference::F32]
                    .into_iter()
                    .flat_map(|r| kernel_choices().into_iter().map(move |f| (r, f)))
                {
                    let (want, lo, hi, sigmas, img) = reference_search(&img, (h, w), &p, reference);
                    let key = |c: &Cand<f64>| (c.y, c.x, c.s, c.v.to_bits());
                    let want: Vec<_> = want.iter().map(key).collect();
                    let what = format!(
                        "{reference:?} {fused:?} {h}x{w} levels {levels} {threshold:?} \
                         {threshold_rel:?}"
                    );
                    let cert = (reference, fused, None);
                    match log_peaks_certified_with(&img, (h, w), &sigmas, &p, cert) {
                        None => declined += 1,
                        Some((got, l, u)) => {
                            assert_eq!(
                                (l.to_bits(), u.to_bits()),
                                (lo.to_bits(), hi.to_bits()),
                                "{what}"
                            );
                            let got: Vec<_> = got.iter().map(key).collect();
                            assert_eq!(got, want, "{what}");
                            compared += 1;
                            maxima += want.len();
                            largest = largest.max(want.len());
                            if reference == Reference::F32 {
                                compared32 += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("compared {compared}, declined {declined}, maxima {maxima}, largest {largest}");
    assert!(
        largest > 2 * SETTLE_CHUNK,
        "a frame settles its candidates in parallel"
    );
    assert!(
        compared > 100 && maxima > 2000 && compared32 > 50,
        "{compared} ({compared32} f32) {declined} {maxima}"
    );
    let p = BlobLogParams {
        threshold: None,
        threshold_rel: None,
        ..BlobLogParams::default()
    };
    assert!(cert64(&[0.5; 100], (10, 10), &[1.0], &p).is_none());
    let p = BlobLogParams::default();
    assert!(cert64(&[0.0; 100], (10, 10), &[1.0], &p).is_none());
    // kernels wider than the frame: exact voxels would cost more than the f64 cube
    let img: Vec<f64> = (0..64 * 64).map(|_| rng.uniform()).collect();
    assert!(cert64(&img, (64, 64), &[100.0], &p).is_none());
    assert!(cert64(&img, (64, 64), &[2.0], &p).is_some());
    // σ so small that the f32 taps overflow; a NaN or infinite pixel
    assert!(cert64(&img, (64, 64), &[1e-20], &p).is_none());
    let mut bad = img.clone();
    bad[7] = f64::NAN;
    assert!(cert64(&bad, (64, 64), &[2.0], &p).is_none());
    bad[7] = f64::INFINITY;
    assert!(cert64(&bad, (64, 64), &[2.0], &p).is_none());
    // a flat frame: every voxel is within the bound of both extrema, past the cap
    let flat = vec![0.5; 200 * 100];
    assert!(cert64(&flat, (200, 100), &[1.0], &p).is_none());
}

/// [`log_peaks_certified`] against the float64 reference with the default knobs.
fn cert64(
    img: &[f64],
    dims: (usize, usize),
    sigmas: &[f64],
    p: &BlobLogParams,
) -> Option<(Vec<Cand<f64>>, f64, f64)> {
    log_peaks_certified(img, dims, sigmas, p, (Reference::F64, &CpuKnobs::default()))
}

/// A device's margin (`DevicePlan`: `e₁·m₃₂ + e₀` in f32 from the largest |f32 pixel|) is at
/// least twice the bound of the exact frame, flushed subnormals included, over magnitudes
/// from 10⁻²⁰ to 10²⁰ and tiny to wide kernels; and what an f32 search with that margin finds
/// (the CPU's search here, as the device's `cert_peaks` would), settled by `settle_device`,
/// is the exact search's result, for f64 and f32 frames.
#[test]
fn device_margin_covers_the_bound_and_settles_like_the_cpu() {
    let mut rng = SplitMix::new(2911);
    let mut settled = 0;
    for (min_sigma, max_sigma, num_sigma) in [(1.0, 3.0, 10), (0.3, 0.3, 1), (2.0, 9.0, 4)] {
        let p = BlobLogParams {
            min_sigma,
            max_sigma,
            num_sigma,
            threshold: Some(0.02),
            ..BlobLogParams::default()
        };
        for f32_frames in [false, true] {
            let sigmas: Vec<f64> = if f32_frames {
                widen(&p.sigma_list::<f32>())
            } else {
                p.sigma_list::<f64>()
            };
            let plan = DevicePlan::new(&sigmas, &p, f32_frames, (512, 512)).unwrap();
            let (e1, e0) = plan.margin();
            for k in -20..=20 {
                let m = 10f64.powi(k) * (1.0 + rng.uniform());
                let m32 = m as f32;
                // the device's two f32 operations
                let e = f64::from(e1 * m32 + e0);
                let need = bound_parts(&plan.planes, plan.reference, ftz_tiny)
                    .iter()
                    .map(|&(c, u)| 2.0 * (c * m + u))
                    .fold(0.0, f64::max);
                assert!(e >= need && e < 1.01 * need, "{k}: {e} vs {need}");
                // and at least the CPU's own margin (gradual underflow)
                assert!(e >= 2.0 * error_bound(&plan.planes, m, plan.reference));
            }
        }
        // settled like the exact search
        for (h, w) in [(40, 52), (7, 90)] {
            let img = blobs(&mut rng, h, w);
            for reference in [Reference::F64, Reference::F32] {
                let f32_frames = reference == Reference::F32;
                let (want, lo, hi, sigmas, img) = reference_search(&img, (h, w), &p, reference);
                // kernels too wide for the frame: no plan (the CPU declines them too)
                let Some(plan) = DevicePlan::new(&sigmas, &p, f32_frames, (h, w)) else {
                    assert!(max_sigma > 3.0);
                    continue;
                };
                settled += 1;
                let (e1, e0) = plan.margin();
                let m32 = img.iter().fold(0.0f32, |a, &v| a.max((v as f32).abs()));
                let e = f64::from(e1 * m32 + e0);
                let (found, near) = search_f32(&img, (h, w), (&plan.planes, None, None), &p, e);
                let (near_lo, near_hi) = near.unwrap();
                let found = Found {
                    cands: &found.cands,
                    near_lo: &near_lo,
                    near_hi: &near_hi,
                    e,
                };
                let (got, glo, ghi) = settle_device(&plan, &img, (h, w), &p, found).unwrap();
                assert_eq!((glo.to_bits(), ghi.to_bits()), (lo.to_bits(), hi.to_bits()));
                let key = |c: &Cand<f64>| (c.y, c.x, c.s, c.v.to_bits());
                let mut got: Vec<_> = got.iter().map(key).collect();
                let mut want: Vec<_> = want.iter().map(key).collect();
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want, "{h}x{w} {reference:?}");
                // a margin below the bound is refused (the CPU computes the frame)
                let (found, _) = search_f32(&img, (h, w), (&plan.planes, None, None), &p, e);
                let small = Found {
                    cands: &found.cands,
                    near_lo: &near_lo,
                    near_hi: &near_hi,
                    e: e / 4.0,
                };
                assert!(settle_device(&plan, &img, (h, w), &p, small).is_none());
            }
        }
    }
    assert!(settled >= 8, "{settled}");
}
