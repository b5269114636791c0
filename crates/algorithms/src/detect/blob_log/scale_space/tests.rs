//! Unit tests of [`super`]: the peak search against the definition, and the banded search
//! against the whole cube.

#![allow(clippy::unwrap_used)]
use super::*;
use crate::synth::SplitMix;

/// The maxima of a cube by the definition: every voxel above `thr` with `v + margin` at
/// least each value of its 3×3×3 neighbourhood (clamped), with the neighbours within the
/// margin marked as [`contenders`](super::peaks::contenders) marks them.
fn naive_peaks<T: Real>(
    cube: &[T],
    (ns, h, w): (usize, usize, usize),
    thr: T,
    margin: T,
) -> Vec<(usize, usize, usize, u32)> {
    let at = |s: usize, y: usize, x: usize| cube[(s * h + y) * w + x].to_f64();
    let mut out = Vec::new();
    for y in 0..h {
        for x in 0..w {
            for s in 0..ns {
                let v = at(s, y, x);
                if v <= thr.to_f64() {
                    continue;
                }
                let (mut peak, mut near) = (true, 0u32);
                for a in 0..3 {
                    for b in 0..3 {
                        for c in 0..3 {
                            let step =
                                |i: usize, d: usize, n: usize| (i + d).saturating_sub(1).min(n - 1);
                            let (sn, yn, xn) = (step(s, a, ns), step(y, b, h), step(x, c, w));
                            let q = at(sn, yn, xn);
                            // in T, as the search adds
                            peak &= (T::from_f64(v) + margin).to_f64() >= q;
                            if margin != T::ZERO
                                && (sn, yn, xn) != (s, y, x)
                                && q + margin.to_f64() > v
                            {
                                near |= 1 << (9 * a + 3 * b + c);
                            }
                        }
                    }
                }
                if peak {
                    out.push((y, x, s, near));
                }
            }
        }
    }
    out
}

/// The blocked search (AVX2 masks for f64 and f32 cubes where the CPU has them, the
/// generic code otherwise) finds the maxima of the definition, with and without a margin,
/// on random cubes of few levels (plateaus and ties) and of many, widths around the block
/// of 16 columns.
#[test]
fn the_search_finds_the_maxima_of_the_definition() {
    fn check<T: Real>(rng: &mut SplitMix) -> usize {
        let mut found = 0;
        for (ns, h, w) in [(1, 1, 1), (3, 4, 15), (4, 7, 16), (5, 9, 33), (2, 3, 50)] {
            for levels in [4.0, 1e6] {
                let cube: Vec<T> = (0..ns * h * w)
                    .map(|_| T::from_f64((rng.uniform() * levels).floor() / levels - 0.3))
                    .collect();
                for (thr, margin) in [(0.1, 0.0), (-1.0, 0.0), (0.2, 0.01), (-1.0, 0.3)] {
                    let (thr, margin) = (T::from_f64(thr), T::from_f64(margin));
                    let mut got = Vec::new();
                    let mut sc = RowScratch::default();
                    rows_peaks(
                        Avx2::detect(),
                        &cube,
                        (h * w, |y: usize| y * w),
                        (0, h, h),
                        (0, w, w),
                        ns,
                        (thr, margin),
                        &mut sc,
                        &mut got,
                    );
                    let got: Vec<_> = got.iter().map(|c| (c.y, c.x, c.s, c.near)).collect();
                    let want = naive_peaks(&cube, (ns, h, w), thr, margin);
                    assert_eq!(got, want, "{ns}x{h}x{w} levels {levels} {thr} {margin}");
                    found += want.len();
                }
            }
        }
        found
    }
    let mut rng = SplitMix::new(12);
    assert!(check::<f64>(&mut rng) > 300);
    assert!(check::<f32>(&mut rng) > 300);
}

/// The relaxed search gives up (`overflow`) past its cap of candidates, instead of a
/// second pass: the certified caller then runs the f64 path.
#[test]
fn the_relaxed_search_overflows_past_its_cap() {
    let mut rng = SplitMix::new(4);
    let (h, w) = (30, 40);
    let img: Vec<f32> = (0..h * w).map(|_| rng.uniform() as f32).collect();
    let p = BlobLogParams {
        threshold: Some(-1.0),
        threshold_rel: None,
        ..BlobLogParams::default()
    };
    let planes: Vec<(LogKernels, f32)> = exact_planes(&p.sigma_list::<f64>())
        .into_iter()
        .map(|(k, s)| (k, s as f32))
        .collect();
    let run =
        |cap| log_peaks_banded_in::<f32, f32>(&img, (h, w), &planes, &p, (8, 2, cap), Some(1e-6));
    assert!(run(Some(3)).overflow);
    let all = run(None);
    assert!(!all.overflow && all.cands.len() > 3);
    assert!(!all.spans.is_empty());
}

/// The banded search (bands of 1, 2, 3, 8 and more rows than the frame, split into 1 to 5
/// parts) finds exactly the maxima of the whole cube (`find_peaks` with the final threshold)
/// with the same extrema, bit for bit: random frames of many levels and of three (plateaus
/// and ties), a constant frame, frames smaller than the kernels, absolute and relative
/// thresholds (a negative `threshold_rel` too), and borders excluded; with the first pass
/// keeping up to 0 or 3 maxima per part too (its parts searched again with the final
/// threshold).
#[test]
fn banded_peaks_equal_the_whole_cube_peaks() {
    let mut rng = SplitMix::new(31);
    let mut checked = 0;
    for (h, w) in [(1, 1), (2, 9), (5, 3), (13, 21), (40, 37), (67, 50)] {
        for levels in [0.0, 3.0, 256.0] {
            let img: Vec<f64> = (0..h * w)
                .map(|_| {
                    if levels == 0.0 {
                        0.5
                    } else {
                        (rng.uniform() * levels).floor() / levels
                    }
                })
                .collect();
            let settings = [
                (None, Some(0.2), (0, 0)),
                (Some(0.01), None, (0, 0)),
                (None, None, (0, 0)),
                (Some(0.02), Some(0.3), (2, 3)),
                (None, Some(-0.5), (1, 0)),
            ];
            for (threshold, threshold_rel, exclude_border) in settings {
                let p = BlobLogParams {
                    max_sigma: 3.0,
                    num_sigma: 5,
                    threshold,
                    threshold_rel,
                    exclude_border,
                    ..BlobLogParams::default()
                };
                let sigmas = p.sigma_list::<f64>();
                let cube = log_cube(&img, h, w, &sigmas).unwrap();
                let (thr, lo, hi) = threshold_of(&cube, &p);
                let want = if lo == hi {
                    Vec::new()
                } else {
                    find_peaks(&cube, h, w, sigmas.len(), thr, exclude_border)
                };
                for (band, nparts, cap) in [1, 2, 3, 8, 100]
                    .into_iter()
                    .flat_map(|b| [1, 2, 5].map(|n| (b, n)))
                    .flat_map(|(b, n)| [None, Some(0), Some(3)].map(|c| (b, n, c)))
                {
                    let b = log_peaks_banded_in::<f64, f64>(
                        &img,
                        (h, w),
                        &exact_planes(&sigmas),
                        &p,
                        (band, nparts, cap),
                        None,
                    );
                    let (mut got, l, u) = (b.cands, b.lo, b.hi);
                    let what = format!(
                        "{h}x{w} levels {levels} {threshold:?} {threshold_rel:?} \
                         {exclude_border:?} band {band} parts {nparts} cap {cap:?}"
                    );
                    assert_eq!(
                        (l.to_bits(), u.to_bits()),
                        (lo.to_bits(), hi.to_bits()),
                        "{what}"
                    );
                    let (t, _, _) = threshold_from((l, u), &p);
                    got.retain(|c| c.v > t && l != u);
                    let key = |c: &Cand<f64>| (c.y, c.x, c.s, c.v.to_bits());
                    assert_eq!(
                        got.iter().map(key).collect::<Vec<_>>(),
                        want.iter().map(key).collect::<Vec<_>>(),
                        "{what}"
                    );
                    checked += want.len();
                }
            }
        }
    }
    assert!(
        checked > 1000,
        "the frames have maxima to compare ({checked})"
    );
}
