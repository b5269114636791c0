//! PACO does not depend on the cube's scale (issue 32): the fixture cube times 2^-332, 2^-100,
//! 2^100, 2^266 (about 1e-100, 1e-30, 1e30, 1e80) gives the S/N map of the cube itself bit for
//! bit, and a, b, flux and std times `1/s²`, `1/s`, `s`, `s` exactly, on the CPU (both passes,
//! `ab_at`, `ab_along`, `refine_peak`, `unbiased_flux`, `paco_array`) and on `opencl:0` (one
//! device, and the multi-device paths of `paco_on`); decimal factors agree to the rounding of the
//! scaled input. Before, ×1e-100 gave the planet S/N 57.5 instead of 10.69 (the shrinkage's
//! fourth powers underflowed) and ×1e80 all-NaN maps (they overflowed). A cube whose largest
//! |value| is outside [2^-400, 2^400) is refused with the supported range.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(not(feature = "opencl"), allow(dead_code, unused_imports))]

mod paco_common;

mod open;

use algorithms::paco::{
    FluxOptions, PacoBackend, PacoJob, PacoMaps, PacoParams, PsfNorm, Strategy, SubPixel, paco,
    paco_ab_at, paco_array, refine_peak, unbiased_flux,
};
use bridge_core::{Array, BridgeError, Device};
use ndarray::{Array2, Array3};
use paco_common::*;

/// The planet of the fixture (output map).
const PLANET: (usize, usize) = (40, 45);

/// Exponents of the power-of-two factors: ≈ 1e-100, 1e-30, 1e30, 1e80.
const EXPS: [i32; 4] = [-332, -100, 100, 266];

/// 2^e, exactly.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

fn params(subpixel: SubPixel, strategy: Strategy) -> PacoParams {
    PacoParams {
        subpixel,
        strategy,
        psf_norm: PsfNorm::Factor(NORM),
        ..Default::default()
    }
}

/// The two CPU passes: the whitened matched-filter cube and the bucketed pairs with templates.
fn modes() -> [PacoParams; 2] {
    [
        params(SubPixel::Off, Strategy::Fast),
        params(SubPixel::Table { q: 32 }, Strategy::Full),
    ]
}

fn scaled(cube: &Array3<f64>, f: f64) -> Array3<f64> {
    cube.mapv(|v| v * f)
}

/// Bit for bit, NaN where NaN.
fn same_bits(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() {
            continue;
        }
        assert_eq!(g.to_bits(), w.to_bits(), "{what} at {i}: {g:e} vs {w:e}");
    }
}

fn flat(m: &Array2<f64>) -> Vec<f64> {
    m.iter().copied().collect()
}

fn times(m: &Array2<f64>, f: f64) -> Vec<f64> {
    m.iter().map(|v| v * f).collect()
}

/// The maps of the cube times 2^e against those of the cube: S/N identical, a·2^-2e, b·2^-e,
/// flux and std ·2^e, all bit for bit.
fn check_pow2_maps(got: &PacoMaps, base: &PacoMaps, e: i32, what: &str) {
    same_bits(&flat(&got.snr), &flat(&base.snr), &format!("{what}: snr"));
    same_bits(
        &flat(&got.a),
        &times(&base.a, pow2(-2 * e)),
        &format!("{what}: a"),
    );
    same_bits(
        &flat(&got.b),
        &times(&base.b, pow2(-e)),
        &format!("{what}: b"),
    );
    same_bits(
        &flat(&got.flux),
        &times(&base.flux, pow2(e)),
        &format!("{what}: flux"),
    );
    same_bits(
        &flat(&got.std),
        &times(&base.std, pow2(e)),
        &format!("{what}: std"),
    );
    assert!(got.snr[PLANET] > 5.0, "{what}: the planet is detected");
}

/// Largest difference relative to the largest |value| of `want`, and whether the NaN masks agree.
fn rel_err(got: &[f64], want: &[f64]) -> (f64, bool) {
    let max = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let mut worst = 0.0f64;
    let mut mask = true;
    for (g, w) in got.iter().zip(want) {
        mask &= g.is_finite() == w.is_finite();
        if w.is_finite() {
            worst = worst.max((g - w).abs() / max);
        }
    }
    (worst, mask)
}

#[test]
fn fixture_is_used_as_given() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(SubPixel::Off, Strategy::Fast);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    assert_eq!(job.cube_scale(), 1.0);
    // the caller's memory, not a copy: the same numbers as before this rule existed
    assert_eq!(job.cube().as_ptr(), cube.as_ptr());
    let big = scaled(&cube, pow2(100));
    let job = PacoJob::new(big.view(), angles.view(), psf.view(), &p).unwrap();
    // largest |value| 131.9·2^100 → into [0.5, 1)
    assert_eq!(job.cube_scale(), pow2(-108));
    let m = job.cube().iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!((0.5..1.0).contains(&m), "{m}");
}

#[test]
fn cpu_power_of_two_factors_are_bit_identical() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    for p in modes() {
        let base = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
        for e in EXPS {
            let c = scaled(&cube, pow2(e));
            let got = paco(c.view(), angles.view(), psf.view(), &p).unwrap();
            check_pow2_maps(&got, &base, e, &format!("cpu {:?} ×2^{e}", p.subpixel));
        }
    }
}

#[test]
fn cpu_decimal_factors_agree_to_the_input_rounding() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(SubPixel::Off, Strategy::Fast);
    let base = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
    for f in [1e-100, 1e-30, 1e30, 1e80] {
        let c = scaled(&cube, f);
        let got = paco(c.view(), angles.view(), psf.view(), &p).unwrap();
        let (es, ms) = rel_err(&flat(&got.snr), &flat(&base.snr));
        let (ef, mf) = rel_err(&flat(&got.flux), &times(&base.flux, f));
        let (ea, ma) = rel_err(&flat(&got.a), &times(&base.a, 1.0 / (f * f)));
        eprintln!("×{f:e}: snr {es:.2e}, flux {ef:.2e}, a {ea:.2e} (relative to the max)");
        assert!(ms && mf && ma, "×{f:e}: NaN masks differ");
        assert!(es <= 1e-12 && ef <= 1e-12 && ea <= 1e-12, "×{f:e}");
        let planet = got.snr[PLANET];
        assert!(
            (planet - base.snr[PLANET]).abs() <= 1e-12 * planet,
            "×{f:e}: {planet}"
        );
    }
}

#[test]
fn ab_at_ab_along_and_refine_peak_scale() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(SubPixel::Table { q: 32 }, Strategy::Full);
    let phi0s = [PLANET, (20, 30), (0, 0), (32, 32)];
    let (a0, b0) = paco_ab_at(cube.view(), angles.view(), psf.view(), &p, &phi0s).unwrap();
    let job0 = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let geom = *job0.geometry();
    let positions: Vec<(f64, f64)> = angles
        .iter()
        .map(|&ang| geom.position(39.75, 45.25, ang))
        .collect();
    let (la0, lb0) = job0.ab_along(&positions).unwrap();
    let pk0 = refine_peak(&job0, (39.0, 45.0), 0.25, 1.0).unwrap();
    for e in EXPS {
        let c = scaled(&cube, pow2(e));
        let (a, b) = paco_ab_at(c.view(), angles.view(), psf.view(), &p, &phi0s).unwrap();
        let scale = |v: &[f64], f: f64| v.iter().map(|x| x * f).collect::<Vec<_>>();
        same_bits(&a, &scale(&a0, pow2(-2 * e)), &format!("ab_at ×2^{e}: a"));
        same_bits(&b, &scale(&b0, pow2(-e)), &format!("ab_at ×2^{e}: b"));
        let job = PacoJob::new(c.view(), angles.view(), psf.view(), &p).unwrap();
        let (la, lb) = job.ab_along(&positions).unwrap();
        same_bits(
            &la,
            &scale(&la0, pow2(-2 * e)),
            &format!("ab_along ×2^{e}: a"),
        );
        same_bits(&lb, &scale(&lb0, pow2(-e)), &format!("ab_along ×2^{e}: b"));
        let pk = refine_peak(&job, (39.0, 45.0), 0.25, 1.0).unwrap();
        assert_eq!((pk.y, pk.x), (pk0.y, pk0.x), "refine_peak ×2^{e}");
        assert_eq!(pk.snr.to_bits(), pk0.snr.to_bits(), "refine_peak ×2^{e}");
        assert_eq!(pk.flux.to_bits(), (pk0.flux * pow2(e)).to_bits());
    }
}

#[test]
fn unbiased_flux_scales_with_the_cube() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(SubPixel::Table { q: 32 }, Strategy::Full);
    let pos = [(40.0, 45.0)];
    let opts = FluxOptions::default();
    let base = unbiased_flux(cube.view(), angles.view(), psf.view(), &p, &pos, opts).unwrap()[0];
    assert!(base.converged && base.flux > 0.0, "{base:?}");
    for e in [-332, 266] {
        let c = scaled(&cube, pow2(e));
        // an initial flux in the cube's units is scaled in with it
        let o = FluxOptions {
            alpha0: 0.5 * base.flux * pow2(e),
            ..opts
        };
        let o0 = FluxOptions {
            alpha0: 0.5 * base.flux,
            ..opts
        };
        let want = unbiased_flux(cube.view(), angles.view(), psf.view(), &p, &pos, o0).unwrap()[0];
        for (got, want, what) in [
            (
                unbiased_flux(c.view(), angles.view(), psf.view(), &p, &pos, opts).unwrap()[0],
                base,
                "alpha0 0",
            ),
            (
                unbiased_flux(c.view(), angles.view(), psf.view(), &p, &pos, o).unwrap()[0],
                want,
                "alpha0 ½·flux",
            ),
        ] {
            assert_eq!(
                got.flux.to_bits(),
                (want.flux * pow2(e)).to_bits(),
                "×2^{e} {what}"
            );
            assert_eq!(
                got.std.to_bits(),
                (want.std * pow2(e)).to_bits(),
                "×2^{e} {what}"
            );
            assert_eq!(got.snr.to_bits(), want.snr.to_bits(), "×2^{e} {what}");
            assert_eq!(got.iterations, want.iterations, "×2^{e} {what}");
        }
    }
    for f in [1e-100, 1e80] {
        let c = scaled(&cube, f);
        let got = unbiased_flux(c.view(), angles.view(), psf.view(), &p, &pos, opts).unwrap()[0];
        assert!(
            (got.snr - base.snr).abs() <= 1e-9 * base.snr,
            "×{f:e}: {got:?}"
        );
        assert!(
            (got.flux / f - base.flux).abs() <= 1e-9 * base.flux,
            "×{f:e}: {got:?}"
        );
    }
}

#[test]
fn paco_array_sees_the_same_scaling() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(SubPixel::Off, Strategy::Fast);
    let base = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let reg = bridge_core::convert::Registry::new();
    for e in [-332, 266] {
        let c = scaled(&cube, pow2(e));
        let (got, _) = paco_array(
            &reg,
            Array::from_ndarray(c.into_dyn()),
            Array::from_ndarray(angles.clone().into_dyn()),
            Array::from_ndarray(psf.clone().into_dyn()),
            &p,
        )
        .unwrap();
        check_pow2_maps(&got, &base, e, &format!("paco_array ×2^{e}"));
    }
}

#[test]
fn cubes_outside_the_supported_range_are_refused() {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(SubPixel::Off, Strategy::Fast);
    let expect_refused = |c: &Array3<f64>, what: &str| {
        let err = paco(c.view(), angles.view(), psf.view(), &p).unwrap_err();
        let BridgeError::InvalidInput(m) = &err else {
            panic!("{what}: {err:?}");
        };
        assert!(m.contains("2^-400 and 2^400"), "{what}: {m}");
        let err = PacoJob::new(c.view(), angles.view(), psf.view(), &p).err();
        assert!(matches!(err, Some(BridgeError::InvalidInput(_))), "{what}");
    };
    // largest |value| 131.9·2^-410 < 2^-400, and 131.9·2^395 ≥ 2^400
    expect_refused(&scaled(&cube, pow2(-410)), "×2^-410");
    expect_refused(&scaled(&cube, pow2(395)), "×2^395");
    // 1e300 next to 1e-300: no power of two brings both into range
    let mut both = cube.clone();
    both[[0, 0, 0]] = 1e300;
    both[[1, 0, 0]] = 1e-300;
    expect_refused(&both, "1e300 and 1e-300");
    // just inside both ends: the S/N of the cube itself
    let base = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
    for e in [-406, 392] {
        let c = scaled(&cube, pow2(e));
        let got = paco(c.view(), angles.view(), psf.view(), &p).unwrap();
        check_pow2_maps(&got, &base, e, &format!("×2^{e}"));
    }
}

#[cfg(feature = "opencl")]
mod opencl {
    use super::*;
    use algorithms::paco::{MultiPolicy, OpenClPaco, Precision, paco_on};
    use test_support::env_flag;

    fn device(precision: Precision) -> Option<OpenClPaco> {
        match algorithms::exec::OpenClExecutor::new(
            crate::open::opencl(),
            bridge_core::Device::OpenCl(0),
        )
        .map(OpenClPaco::with_executor)
        {
            Ok(b) if precision == Precision::F64 && !b.has_fp64() => {
                assert!(!env_flag("ARRAYBRIDGE_REQUIRE_OPENCL"), "no doubles");
                eprintln!("skipping: the OpenCL device has no doubles");
                None
            }
            Ok(b) => Some(b.with_precision(precision)),
            Err(e) => {
                assert!(
                    !env_flag("ARRAYBRIDGE_REQUIRE_OPENCL"),
                    "ARRAYBRIDGE_REQUIRE_OPENCL=1 but no OpenCL device: {e}"
                );
                eprintln!("skipping: no OpenCL device ({e})");
                None
            }
        }
    }

    /// S/N from a and b.
    fn snr(a: &Array2<f64>, b: &Array2<f64>) -> Vec<f64> {
        a.iter().zip(b).map(|(a, b)| b / a.sqrt()).collect()
    }

    /// `opencl:0` in double: power-of-two factors give the device's own S/N of the cube bit
    /// for bit (and the CPU's, to 1e-12), a and b scaled exactly; decimal factors to 1e-12.
    #[test]
    fn device_f64_does_not_depend_on_the_scale() {
        let Some(dev) = device(Precision::F64) else {
            return;
        };
        let (cube, angles, psf) = (cube(), angles(), psf());
        for p in modes() {
            let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
            let (a0, b0) = dev.ab_maps(&job).unwrap();
            let cpu = open::paco_backend(Device::Cpu)
                .unwrap()
                .ab_maps(&job)
                .unwrap();
            let (e, m) = rel_err(&snr(&a0, &b0), &snr(&cpu.0, &cpu.1));
            assert!(m && e <= 1e-12, "device vs cpu: {e:e}");
            for e in EXPS {
                let c = scaled(&cube, pow2(e));
                let job = PacoJob::new(c.view(), angles.view(), psf.view(), &p).unwrap();
                let (a, b) = dev.ab_maps(&job).unwrap();
                let what = format!("opencl f64 {:?} ×2^{e}", p.subpixel);
                same_bits(&snr(&a, &b), &snr(&a0, &b0), &format!("{what}: snr"));
                same_bits(&flat(&a), &times(&a0, pow2(-2 * e)), &format!("{what}: a"));
                same_bits(&flat(&b), &times(&b0, pow2(-e)), &format!("{what}: b"));
                let (da, db) = dev.ab_at(&job, &[PLANET, (0, 0)]).unwrap();
                assert_eq!(da[0].to_bits(), a[PLANET].to_bits(), "{what}: ab_at a");
                assert_eq!(db[0].to_bits(), b[PLANET].to_bits(), "{what}: ab_at b");
                assert!(da[1].is_nan() && db[1].is_nan());
            }
            for f in [1e-100, 1e-30, 1e30, 1e80] {
                let c = scaled(&cube, f);
                let job = PacoJob::new(c.view(), angles.view(), psf.view(), &p).unwrap();
                let (a, b) = dev.ab_maps(&job).unwrap();
                let (es, ms) = rel_err(&snr(&a, &b), &snr(&a0, &b0));
                let (eb, mb) = rel_err(&flat(&b), &times(&b0, 1.0 / f));
                assert!(
                    ms && mb && es <= 1e-12 && eb <= 1e-12,
                    "×{f:e}: {es:e} {eb:e}"
                );
            }
        }
    }

    /// In float the device brings the cube's largest |value| into [0.5, 1) as it converts
    /// it, so the fourth powers of the shrinkage stay in float's range (max 3.4e38) at any
    /// scale: before, ×1e-20 gave S/N 57.5 at the planet and ×1e8, ×1e12 NaN there in float
    /// although the double job needs no scaling there. Powers of two: the float maps of the
    /// cube itself (a, b scaled exactly); other factors: the CPU's S/N to float precision.
    #[test]
    fn device_f32_does_not_depend_on_the_scale() {
        let Some(dev) = device(Precision::F32) else {
            return;
        };
        let (cube, angles, psf) = (cube(), angles(), psf());
        for p in modes() {
            let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
            let (a0, b0) = dev.ab_maps(&job).unwrap();
            let cpu = open::paco_backend(Device::Cpu)
                .unwrap()
                .ab_maps(&job)
                .unwrap();
            let s_cpu = snr(&cpu.0, &cpu.1);
            for e in [-332, -100, -50, 40, 100, 266] {
                let c = scaled(&cube, pow2(e));
                let job = PacoJob::new(c.view(), angles.view(), psf.view(), &p).unwrap();
                let (a, b) = dev.ab_maps(&job).unwrap();
                let what = format!("opencl f32 {:?} ×2^{e}", p.subpixel);
                same_bits(&flat(&a), &times(&a0, pow2(-2 * e)), &format!("{what}: a"));
                same_bits(&flat(&b), &times(&b0, pow2(-e)), &format!("{what}: b"));
            }
            for f in [1e-100, 1e-20, 1e-12, 1e8, 1e12, 1e30, 1e80] {
                let c = scaled(&cube, f);
                let job = PacoJob::new(c.view(), angles.view(), psf.view(), &p).unwrap();
                let (a, b) = dev.ab_maps(&job).unwrap();
                let (es, ms) = rel_err(&snr(&a, &b), &s_cpu);
                eprintln!(
                    "opencl f32 {:?} ×{f:e}: snr {es:.2e} from the cpu's (relative to the max)",
                    p.subpixel
                );
                assert!(ms && es <= 1e-4, "opencl f32 ×{f:e}: {es:e}");
            }
        }
    }

    /// The multi-device run: statistics rows on the CPU and `opencl:0` together, pair units
    /// with templates on `opencl:0`, and the CPU alone with templates; each bit-identical to
    /// its own run on the unscaled cube, a and b scaled exactly.
    #[test]
    fn multi_device_does_not_depend_on_the_scale() {
        if device(Precision::F64).is_none() {
            return;
        }
        let (cube, angles, psf) = (cube(), angles(), psf());
        let cases = [
            (
                params(SubPixel::Off, Strategy::Fast),
                vec![Device::Cpu, Device::OpenCl(0)],
            ),
            (
                params(SubPixel::Table { q: 32 }, Strategy::Fast),
                vec![Device::OpenCl(0)],
            ),
            (
                params(SubPixel::Table { q: 32 }, Strategy::Fast),
                vec![Device::Cpu],
            ),
        ];
        for (p, devices) in cases {
            let devices: Vec<_> = devices.into_iter().map(open::open).collect();
            let run = |c: &Array3<f64>| {
                paco_on(
                    c.view(),
                    angles.view(),
                    psf.view(),
                    &p,
                    &devices,
                    MultiPolicy::default(),
                )
                .unwrap()
                .maps
            };
            let base = run(&cube);
            for e in [-332, 266] {
                let got = run(&scaled(&cube, pow2(e)));
                let what = format!("paco_on {devices:?} {:?} ×2^{e}", p.subpixel);
                check_pow2_maps(&got, &base, e, &what);
            }
        }
    }
}
