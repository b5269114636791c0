//! PACO detection on the fixture: planet at the map maximum, unbiased flux, false alarms.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod paco_common;

use algorithms::paco::{
    FastPaco, FluxOptions, FullPaco, PacoParams, PsfNorm, SubPixel, Variant, aperture_flux,
    fit_airy_fwhm, paco, paco_ab_at, unbiased_flux,
};
use ndarray::Array2;
use paco_common::*;

fn argmax(m: &Array2<f64>) -> ((usize, usize), f64) {
    m.indexed_iter().filter(|(_, v)| v.is_finite()).fold(
        ((0, 0), f64::NEG_INFINITY),
        |best, (i, &v)| {
            if v > best.1 { (i, v) } else { best }
        },
    )
}

#[test]
fn planet_is_the_maximum() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    for (variant, sub, want, snr) in [
        (Variant::Vip, SubPixel::Off, (40, 45), 13.600),
        (Variant::Vip, SubPixel::VipFft, (39, 45), 13.720),
        (Variant::Paper, SubPixel::Off, (40, 45), 10.685),
    ] {
        let p = PacoParams {
            variant,
            subpixel: sub,
            psf_norm: PsfNorm::Factor(NORM),
            ..Default::default()
        };
        let maps = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let (pos, best) = argmax(&maps.snr);
        eprintln!(
            "{variant:?} {sub:?}: peak {pos:?} S/N {best:.4} flux {:.2}",
            maps.flux[pos]
        );
        assert_eq!(pos, want);
        assert!((best - snr).abs() < 1e-3, "{best}");
    }
}

#[test]
fn calibrated_snr_has_unit_spread() {
    use algorithms::paco::calibrated_snr;
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = PacoParams {
        variant: Variant::Vip,
        psf_norm: PsfNorm::Factor(NORM),
        ..Default::default()
    };
    let maps = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let cal = calibrated_snr(&maps.snr, (32.0, 32.0), &[(40, 45)], 4.0);
    let (pos, best) = argmax(&cal);
    eprintln!("calibrated S/N peak {pos:?} {best:.3}");
    assert_eq!(pos, (40, 45));
    let mut off: Vec<f64> = cal
        .indexed_iter()
        .filter(|((y, x), v)| {
            v.is_finite() && ((*y as f64 - 40.0).powi(2) + (*x as f64 - 45.0).powi(2)) > 16.0
        })
        .map(|(_, &v)| v)
        .collect();
    off.sort_by(f64::total_cmp);
    let med = off[off.len() / 2];
    let mut dev: Vec<f64> = off.iter().map(|v| (v - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let spread = 1.4826 * dev[dev.len() / 2];
    eprintln!("off-planet robust spread {spread:.3}");
    assert!((spread - 1.0).abs() < 0.15);
}

#[test]
fn planet_free_cube_has_no_detection() {
    let (cube, angles, psf) = (cube_noplanet(), angles(), psf());
    for variant in [Variant::Vip, Variant::Paper] {
        for sub in [SubPixel::Off, SubPixel::Table { q: 32 }] {
            let p = PacoParams {
                variant,
                subpixel: sub,
                psf_norm: PsfNorm::Factor(NORM),
                ..Default::default()
            };
            let maps = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
            let (pos, best) = argmax(&maps.snr);
            eprintln!("{variant:?} {sub:?}: max S/N {best:.3} at {pos:?}");
            assert!(best < 5.0);
        }
    }
}

#[test]
fn unbiased_flux_within_five_percent() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let truth = 572.4;
    for variant in [Variant::Vip, Variant::Paper] {
        let p = PacoParams {
            variant,
            psf_norm: PsfNorm::Factor(NORM),
            ..Default::default()
        };
        let est = unbiased_flux(
            cube.view(),
            angles.view(),
            psf.view(),
            &p,
            &[(39.0, 45.0), (39.50, 44.99)],
            FluxOptions::default(),
        )
        .unwrap();
        for e in &est {
            eprintln!(
                "{variant:?}: {e:?} ({:+.2}%)",
                100.0 * (e.flux / truth - 1.0)
            );
            assert!((e.flux / truth - 1.0).abs() < 0.05, "{}", e.flux);
            assert!(e.converged);
        }
        // Spec §8 acceptance at the exact position, sub-pixel templates: 588 ± 3 % (the
        // reference measured +2.8 % against the truth; this crate gets 587.4).
        let exact = &est[1];
        assert!((exact.flux / 588.0 - 1.0).abs() < 0.03, "{}", exact.flux);
    }
}

#[test]
fn psf_normalisation_matches_vip() {
    let psf = psf();
    let f = aperture_flux(psf.view(), 4.241616855884997);
    assert!((f / NORM - 1.0).abs() < 1e-12, "{f}");
    let fwhm = fit_airy_fwhm(psf.view()).unwrap();
    eprintln!("fitted FWHM {fwhm}");
    assert!((fwhm - 4.241616855884997).abs() < 1e-4, "{fwhm}");
}

#[test]
fn phi0s_subset_full_and_fast_agree() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let mut fast = FastPaco::new(cube.view(), angles.view(), psf.view(), 4, 49);
    fast.params_mut().psf_norm = PsfNorm::Factor(NORM);
    fast.params_mut().variant = Variant::Vip;
    let mut full = FullPaco::new(cube.view(), angles.view(), psf.view(), 4, 49);
    full.params_mut().psf_norm = PsfNorm::Factor(NORM);
    full.params_mut().variant = Variant::Vip;
    full.params_mut().max_tile_bytes = 1 << 20; // many small bands
    full.params_mut().batch_size = 7;
    let (a1, b1) = fast.paco_calc(None).unwrap();
    let (a2, b2) = full.paco_calc(None).unwrap();
    for (x, y) in a1.iter().zip(&a2).chain(b1.iter().zip(&b2)) {
        assert!(
            x.is_nan() && y.is_nan() || (x - y).abs() <= 1e-10 * x.abs().max(1e-3),
            "{x} {y}"
        );
    }
    let phi0s = [(40usize, 45usize), (39, 45), (0, 0), (32, 50)];
    let (a3, b3) = full.paco_calc(Some(&phi0s)).unwrap();
    for (i, &(y, x)) in phi0s.iter().enumerate() {
        let j = y * 64 + x;
        assert!(a3[i].is_nan() && a1[j].is_nan() || (a3[i] - a1[j]).abs() <= 1e-10 * a1[j].abs());
        assert!(
            b3[i].is_nan() && b1[j].is_nan()
                || (b3[i] - b1[j]).abs() <= 1e-10 * b1[j].abs().max(1.0)
        );
    }
    assert!(
        paco_ab_at(
            cube.view(),
            angles.view(),
            psf.view(),
            &PacoParams::default(),
            &[(64, 0)]
        )
        .is_err()
    );
}

#[test]
fn bad_inputs_are_errors() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = PacoParams {
        psf_norm: PsfNorm::Factor(NORM),
        ..Default::default()
    };
    let short = angles.slice(ndarray::s![..39]).to_owned();
    assert!(paco(cube.view(), short.view(), psf.view(), &p).is_err());
    let big = Array2::<f64>::zeros((65, 65));
    assert!(paco(cube.view(), angles.view(), big.view(), &p).is_err());
    let nan = cube.mapv(|_| f64::NAN);
    assert!(paco(nan.view(), angles.view(), psf.view(), &p).is_err());
    let p49 = PacoParams {
        patch_area: Some(13),
        ..p.clone()
    };
    assert!(paco(cube.view(), angles.view(), psf.view(), &p49).is_err());
}

#[test]
fn odd_frames_and_nearest_rounding() {
    // Odd N: star at the centre pixel; a planet injected there is found where injected.
    let (cube, angles, psf) = (cube(), angles(), psf());
    let odd = cube.slice(ndarray::s![.., ..63, ..63]).to_owned();
    for rounding in [
        algorithms::paco::Rounding::Trunc,
        algorithms::paco::Rounding::Nearest,
    ] {
        let p = PacoParams {
            psf_norm: PsfNorm::Factor(NORM),
            rounding,
            center: algorithms::paco::Center::At(32.0, 32.0),
            subpixel: SubPixel::Table { q: 16 },
            ..Default::default()
        };
        let maps = paco(odd.view(), angles.view(), psf.view(), &p).unwrap();
        let (pos, best) = argmax(&maps.snr);
        eprintln!("odd 63 {rounding:?}: peak {pos:?} S/N {best:.3}");
        assert!((pos.0 as f64 - 39.5).abs() <= 1.5 && (pos.1 as f64 - 45.0).abs() <= 1.0);
    }
    // Odd N with the default centre: crop so the star sits on the centre pixel (31, 31).
    let odd = cube.slice(ndarray::s![.., 1.., 1..]).to_owned();
    let p = PacoParams {
        psf_norm: PsfNorm::Factor(NORM),
        subpixel: SubPixel::Table { q: 32 },
        ..Default::default()
    };
    let maps = paco(odd.view(), angles.view(), psf.view(), &p).unwrap();
    let (pos, best) = argmax(&maps.snr);
    eprintln!("odd 63, default centre: peak {pos:?} S/N {best:.3}");
    assert!((pos.0 as f64 - 38.5).abs() <= 1.0 && (pos.1 as f64 - 44.0).abs() <= 1.0);
    assert!(best > 9.0);
}

#[test]
fn off_centre_psf_is_recentred() {
    use algorithms::paco::{centroid, normalize_psf};
    let gauss = |cy: f64, cx: f64| {
        Array2::from_shape_fn((21, 21), |(y, x)| {
            (-((y as f64 - cy).powi(2) + (x as f64 - cx).powi(2)) / (2.0 * 1.7f64.powi(2))).exp()
        })
    };
    let centred = normalize_psf(gauss(10.0, 10.0).view(), PsfNorm::FitAiry, 1.0).unwrap();
    let off = normalize_psf(gauss(10.3, 9.6).view(), PsfNorm::FitAiry, 1.0).unwrap();
    let (cy, cx) = centroid(off.psf.view());
    eprintln!(
        "recentred centroid ({cy:.4}, {cx:.4}); factors {} {}",
        centred.factor, off.factor
    );
    assert!((cy - 10.0).abs() < 0.02 && (cx - 10.0).abs() < 0.02);
    assert!((off.factor / centred.factor - 1.0).abs() < 1e-3);
}
