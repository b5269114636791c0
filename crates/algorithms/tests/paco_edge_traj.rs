//! The `Disk` edge rule and explicit trajectories ([`PacoJob::ab_along`]) on the CPU.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod paco_common;

use algorithms::paco::{
    EdgeRule, PacoJob, PacoParams, PsfNorm, Strategy, SubPixel, Variant, paco, paco_ab_at,
};
use bridge_core::BridgeError;
use paco_common::*;

fn params(edge: EdgeRule, subpixel: SubPixel, strategy: Strategy) -> PacoParams {
    PacoParams {
        variant: Variant::Vip,
        subpixel,
        strategy,
        edge,
        psf_norm: PsfNorm::Factor(NORM),
        ..Default::default()
    }
}

/// Statistics at a pixel do not depend on the edge rule, so every pixel valid under the box rule
/// has the same a and b under the disk rule; the disk rule only adds valid pixels.
#[test]
fn disk_rule_extends_the_box_rule() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    for (subpixel, strategy) in [
        (SubPixel::Off, Strategy::Fast),
        (SubPixel::Off, Strategy::Full),
        (SubPixel::Table { q: 8 }, Strategy::Fast),
    ] {
        let run = |edge| {
            paco(
                cube.view(),
                angles.view(),
                psf.view(),
                &params(edge, subpixel, strategy),
            )
            .unwrap()
        };
        let (bx, dk) = (run(EdgeRule::Box), run(EdgeRule::Disk));
        let nb = bx.a.iter().filter(|v| v.is_finite()).count();
        let nd = dk.a.iter().filter(|v| v.is_finite()).count();
        assert_eq!(nb, 2305);
        assert!(nd > nb, "disk rule: {nd} valid pixels, box rule {nb}");
        for ((i, &a), &b) in bx.a.indexed_iter().zip(bx.b.iter()) {
            if a.is_finite() {
                assert_eq!(dk.a[i], a, "{i:?} {subpixel:?} {strategy:?}");
                assert_eq!(dk.b[i], b, "{i:?} {subpixel:?} {strategy:?}");
            }
        }
        eprintln!("{subpixel:?} {strategy:?}: {nb} valid pixels (box), {nd} (disk)");
    }
    // Fast and Full agree under the disk rule too.
    let f = paco(
        cube.view(),
        angles.view(),
        psf.view(),
        &params(EdgeRule::Disk, SubPixel::Off, Strategy::Fast),
    )
    .unwrap();
    let g = paco(
        cube.view(),
        angles.view(),
        psf.view(),
        &params(EdgeRule::Disk, SubPixel::Off, Strategy::Full),
    )
    .unwrap();
    for (x, y) in f.a.iter().zip(g.a.iter()) {
        assert!(x.is_nan() && y.is_nan() || (x - y).abs() <= 1e-12 * x.abs());
    }
}

/// The smallest frame: the box rule needs 2R+3 pixels, the disk rule 2R+1.
#[test]
fn minimum_frame_per_edge_rule() {
    let mut rng = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let cube = ndarray::Array3::from_shape_fn((12, 9, 9), |_| next());
    let angles = ndarray::Array1::linspace(0.0, 40.0, 12);
    let psf = ndarray::Array2::from_shape_fn((9, 9), |(y, x)| {
        let (dy, dx) = (y as f64 - 4.0, x as f64 - 4.0);
        (-(dy * dy + dx * dx) / 4.0).exp()
    });
    let p = |edge| PacoParams {
        edge,
        psf_norm: PsfNorm::None,
        ..Default::default()
    };
    // 9×9 frames, R = 4: too small for the box rule, one statistics pixel with the disk rule.
    let err = PacoJob::new(cube.view(), angles.view(), psf.view(), &p(EdgeRule::Box))
        .err()
        .unwrap();
    assert!(
        matches!(&err, BridgeError::InvalidInput(m) if m.contains("11×11")),
        "{err}"
    );
    let maps = paco(cube.view(), angles.view(), psf.view(), &p(EdgeRule::Disk)).unwrap();
    let finite: Vec<_> = maps
        .a
        .indexed_iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(i, _)| i)
        .collect();
    // Only the star itself stays on the one statistics pixel in every frame.
    assert_eq!(finite, vec![(4, 4)]);
}

/// Positions from the geometry give exactly the numbers of `paco_ab_at`; other positions pick
/// other pixels; bad input is a typed error.
#[test]
fn explicit_trajectories() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    for subpixel in [SubPixel::Off, SubPixel::VipFft] {
        let p = params(EdgeRule::Box, subpixel, Strategy::Fast);
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let geom = *job.geometry();
        let phi0s = [(40usize, 45usize), (20, 30), (10, 50), (0, 0), (33, 33)];
        let positions: Vec<(f64, f64)> = phi0s
            .iter()
            .flat_map(|&(y, x)| {
                angles
                    .iter()
                    .map(move |&ang| geom.position(y as f64, x as f64, ang))
            })
            .collect();
        let (a1, b1) = job.ab_along(&positions).unwrap();
        let (a2, b2) = paco_ab_at(cube.view(), angles.view(), psf.view(), &p, &phi0s).unwrap();
        for i in 0..phi0s.len() {
            assert!(
                a1[i].to_bits() == a2[i].to_bits() && b1[i].to_bits() == b2[i].to_bits(),
                "{:?}: {} {} vs {} {}",
                phi0s[i],
                a1[i],
                b1[i],
                a2[i],
                b2[i]
            );
        }
        assert!(a1[3].is_nan(), "(0, 0) leaves the statistics box");
        // A stationary source at the planet's position is a different hypothesis.
        let still: Vec<(f64, f64)> = angles.iter().map(|_| (40.0, 45.0)).collect();
        let (a3, b3) = job.ab_along(&still).unwrap();
        assert!(a3[0].is_finite() && (b3[0] - b1[0]).abs() > 1e-6 * b1[0].abs());
    }
    let p = params(EdgeRule::Box, SubPixel::Off, Strategy::Fast);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let err = job.ab_along(&[(30.0, 30.0); 7]).unwrap_err();
    assert!(matches!(err, BridgeError::ShapeMismatch { .. }), "{err}");
    let mut bad = vec![(30.0, 30.0); angles.len()];
    bad[3].1 = f64::NAN;
    let err = job.ab_along(&bad).unwrap_err();
    assert!(err.to_string().contains("frame 3"), "{err}");
    let (a, _) = job.ab_along(&[]).unwrap();
    assert!(a.is_empty());
}

/// Spec §13: at the exact sub-pixel planet position (r = 15 px, θ = 30°), sub-pixel templates
/// give S/N 17.70 (VIP) and 13.46 (paper). With VIP's FFT-shifted templates and truncation this
/// crate gets 17.68 and 13.45 (the spec does not say which interpolator its figure used; the
/// q = 32 table gives the same to 1e-4).
#[test]
fn snr_at_the_exact_planet_position() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let (y0, x0) = (
        32.0 + 15.0 * 30f64.to_radians().sin(),
        32.0 + 15.0 * 30f64.to_radians().cos(),
    );
    for (variant, want) in [(Variant::Vip, 17.70), (Variant::Paper, 13.46)] {
        let mut p = params(EdgeRule::Box, SubPixel::VipFft, Strategy::Fast);
        p.variant = variant;
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let geom = *job.geometry();
        let pos: Vec<(f64, f64)> = angles
            .iter()
            .map(|&ang| geom.position(y0, x0, ang))
            .collect();
        let (a, b) = job.ab_along(&pos).unwrap();
        let snr = b[0] / a[0].sqrt();
        eprintln!(
            "{variant:?}: S/N {snr:.4} at ({y0:.3}, {x0:.3}), flux {:.2}",
            b[0] / a[0]
        );
        assert!((snr - want).abs() < 0.03, "{variant:?}: {snr}");
    }
}

/// Spec §9 astrometry: refining the S/N peak on a 0.25-px grid moves it towards the injected
/// position (39.50, 44.99) and raises the S/N from 13.7 (integer grid) to ~17.5.
#[test]
fn refine_peak_finds_the_planet() {
    use algorithms::paco::refine_peak;
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(EdgeRule::Box, SubPixel::Table { q: 32 }, Strategy::Fast);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let peak = refine_peak(&job, (39.0, 45.0), 0.25, 1.0).unwrap();
    eprintln!("{peak:?}");
    let d = ((peak.y - 39.5).powi(2) + (peak.x - 44.99).powi(2)).sqrt();
    // The integer peak (39, 45) is 0.5 px away; noise keeps the refined one at ~0.35 px.
    assert!(d < 0.45, "refined peak {peak:?} is {d} px from the truth");
    assert!(peak.snr > 17.0, "{peak:?}");
    assert!(refine_peak(&job, (39.0, 45.0), 0.0, 1.0).is_err());
    assert!(refine_peak(&job, (f64::NAN, 45.0), 0.25, 1.0).is_err());
    assert!(refine_peak(&job, (0.0, 0.0), 0.25, 1.0).is_err());
}

/// A star centre off the frame is a typed error, not an all-NaN map.
#[test]
fn centre_outside_the_frame_is_an_error() {
    use algorithms::paco::Center;
    let (cube, angles, psf) = (cube(), angles(), psf());
    for (cy, cx) in [(1000.0, 10.0), (-0.5, 32.0), (32.0, 63.5)] {
        let p = PacoParams {
            center: Center::At(cy, cx),
            ..Default::default()
        };
        let err = PacoJob::new(cube.view(), angles.view(), psf.view(), &p)
            .err()
            .unwrap();
        assert!(
            matches!(&err, BridgeError::InvalidArgument { .. })
                && err.to_string().contains("outside the 64×64 frame"),
            "{err}"
        );
    }
    let p = PacoParams {
        center: Center::At(63.0, 0.0),
        ..Default::default()
    };
    assert!(PacoJob::new(cube.view(), angles.view(), psf.view(), &p).is_ok());
}
