#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(
    not(any(feature = "opencl", feature = "cuda")),
    allow(dead_code, unused_imports)
)]
//! PACO on OpenCL and CUDA against the CPU backend (one portable kernel source): no templates,
//! table templates, per-pair templates (VipFft, Spline5; VipFft also against VIP's golden maps),
//! batching of the pairs, patch radii 5 and 6 (global-scratch kernels), `EdgeRule::Disk`.
//!
//! - OpenCL tests run on any OpenCL device (PoCL in CI) and skip without one, unless
//!   `ARRAYBRIDGE_REQUIRE_OPENCL=1`;
//! - CUDA tests skip without a GPU unless `ARRAYBRIDGE_REQUIRE_GPU=1`;
//! - the NVRTC test compiles every source of `paco::gpu_kernels::ALL` in every option set and
//!   skips without libnvrtc unless `ARRAYBRIDGE_REQUIRE_NVRTC=1`
//!   (`eval "$(bash scripts/nvrtc.sh --print-env)"`).
//!
//! Run: `cargo test -p algorithms --features opencl,cuda --test paco_gpu`. The timing test on a
//! 61×100×100 cube is ignored by default (`-- --ignored --nocapture opencl_timing`).

mod open;
mod paco_common;

#[cfg(any(feature = "opencl", feature = "cuda"))]
use algorithms::paco::Precision;
use algorithms::paco::{
    EdgeRule, PacoBackend, PacoJob, PacoParams, PsfNorm, Rounding, SubPixel, Variant,
};
use bridge_core::Device;
use ndarray::Array2;
use paco_common::*;
use test_support::env_flag;

fn params(variant: Variant) -> PacoParams {
    params_sub(variant, SubPixel::Off)
}

fn params_sub(variant: Variant, subpixel: SubPixel) -> PacoParams {
    PacoParams {
        variant,
        subpixel,
        rounding: Rounding::Trunc,
        psf_norm: PsfNorm::Factor(NORM),
        ..Default::default()
    }
}

#[cfg(feature = "opencl")]
fn opencl(precision: Precision) -> Option<algorithms::paco::OpenClPaco> {
    match algorithms::exec::OpenClExecutor::new(
        crate::open::opencl(),
        bridge_core::Device::OpenCl(0),
    )
    .map(algorithms::paco::OpenClPaco::with_executor)
    {
        Ok(b) => {
            if precision == Precision::F64 && !b.has_fp64() {
                assert!(
                    !env_flag("ARRAYBRIDGE_REQUIRE_OPENCL"),
                    "the OpenCL device has no doubles"
                );
                eprintln!("skipping: the OpenCL device has no doubles");
                return None;
            }
            Some(b.with_precision(precision))
        }
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

#[cfg(feature = "cuda")]
fn cuda(precision: Precision) -> Option<algorithms::paco::CudaPaco> {
    match algorithms::exec::CudaExecutor::new(0).map(algorithms::paco::CudaPaco::with_executor) {
        Ok(b) => Some(b.with_precision(precision)),
        Err(e) => {
            assert!(
                !env_flag("ARRAYBRIDGE_REQUIRE_GPU"),
                "ARRAYBRIDGE_REQUIRE_GPU=1 but no CUDA device: {e}"
            );
            eprintln!("skipping: no CUDA device ({e})");
            None
        }
    }
}

/// Worst relative error of a (per pixel) and of b (relative to max|b|); panics unless the NaN
/// masks are identical.
fn compare(
    cpu: &(Array2<f64>, Array2<f64>),
    dev: &(Array2<f64>, Array2<f64>),
) -> (f64, f64, usize) {
    let maxb = cpu
        .1
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let (mut wa, mut wb, mut finite) = (0.0f64, 0.0f64, 0usize);
    for (((ca, cb), da), db) in cpu.0.iter().zip(&cpu.1).zip(&dev.0).zip(&dev.1) {
        assert_eq!(ca.is_finite(), da.is_finite(), "a NaN masks differ");
        assert_eq!(cb.is_finite(), db.is_finite(), "b NaN masks differ");
        if !ca.is_finite() {
            continue;
        }
        finite += 1;
        wa = wa.max((ca - da).abs() / ca.abs());
        wb = wb.max((cb - db).abs() / maxb);
    }
    (wa, wb, finite)
}

/// Position (y, x) of the S/N maximum.
fn snr_peak(ab: &(Array2<f64>, Array2<f64>)) -> (usize, usize) {
    let mut best = (f64::NEG_INFINITY, (0, 0));
    for ((y, x), a) in ab.0.indexed_iter() {
        let s = ab.1[[y, x]] / a.sqrt();
        if s.is_finite() && s > best.0 {
            best = (s, (y, x));
        }
    }
    best.1
}

/// `x` and `y` are the same values bit for bit (any NaN equal to any NaN), element by element.
fn same_bits(x: &[f64], y: &[f64], what: &str) {
    assert_eq!(x.len(), y.len(), "{what}");
    for (i, (a, b)) in x.iter().zip(y).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{what}: element {i}: {a:e} vs {b:e}"
        );
    }
}

/// Device maps of the fixture vs the CPU backend, in both variants.
fn check_fixture(dev: &dyn PacoBackend, tol: f64, label: &str) {
    check_fixture_sub(dev, tol, label, SubPixel::Off);
}

/// Device maps of the fixture vs the CPU backend, in both variants, with `subpixel` templates.
fn check_fixture_sub(dev: &dyn PacoBackend, tol: f64, label: &str, subpixel: SubPixel) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    for variant in [Variant::Vip, Variant::Paper] {
        let p = params_sub(variant, subpixel);
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let cpu = open::paco_backend(Device::Cpu)
            .unwrap()
            .ab_maps(&job)
            .unwrap();
        let t0 = std::time::Instant::now();
        let got = dev.ab_maps(&job).unwrap();
        let dt = t0.elapsed();
        let (wa, wb, finite) = compare(&cpu, &got);
        eprintln!(
            "{label} {variant:?} {subpixel:?}: {finite} finite, a worst rel {wa:.3e}, b worst {wb:.3e}·max|b|, {:.1} ms",
            dt.as_secs_f64() * 1e3
        );
        assert_eq!(finite, 2305, "valid pixels of the fixture");
        assert!(wa <= tol, "{label} {variant:?}: a off by {wa:e}");
        assert!(wb <= tol, "{label} {variant:?}: b off by {wb:e}");
        let peak = snr_peak(&got);
        assert_eq!(peak, snr_peak(&cpu), "S/N peak moved");
        let truth = if subpixel == SubPixel::Off {
            (40, 45)
        } else {
            (39, 45)
        };
        assert_eq!(peak, truth, "the planet is the S/N maximum");
    }
}

/// `ab_at` on a few positions (planet, background, NaN border) vs the CPU.
fn check_ab_at(dev: &dyn PacoBackend, tol: f64) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params(Variant::Vip);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let phi0s = [(40, 45), (20, 30), (0, 0), (32, 32), (50, 17), (40, 45)];
    let (ca, cb) = open::paco_backend(Device::Cpu)
        .unwrap()
        .ab_at(&job, &phi0s)
        .unwrap();
    let (da, db) = dev.ab_at(&job, &phi0s).unwrap();
    let (ea, eb) = dev.ab_at(&job, &[]).unwrap();
    assert!(ea.is_empty() && eb.is_empty());
    for i in 0..phi0s.len() {
        assert_eq!(ca[i].is_finite(), da[i].is_finite(), "{:?}", phi0s[i]);
        if ca[i].is_finite() {
            assert!(
                (ca[i] - da[i]).abs() <= tol * ca[i].abs(),
                "a at {:?}",
                phi0s[i]
            );
            assert!(
                (cb[i] - db[i]).abs() <= tol * cb[i].abs().max(1.0),
                "b at {:?}",
                phi0s[i]
            );
        }
    }
}

/// Device maps vs VIP 2.1.1's golden maps `{prefix}_{a,b}.fits` as the CPU golden tests check
/// them: NaN masks identical, every pixel within `tol` (a relative, b relative to max|b|)
/// except float-trap pixels (a trajectory coordinate within 1e-9 of an integer, never at the
/// planet), at most `max_trapped` of them.
fn check_golden(
    job: &PacoJob<'_>,
    got: &(Array2<f64>, Array2<f64>),
    prefix: &str,
    tol: f64,
    max_trapped: usize,
) {
    let ga = golden(&format!("{prefix}_a.fits"));
    let gb = golden(&format!("{prefix}_b.fits"));
    let geom = *job.geometry();
    let maxb = gb
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let (mut over, mut trapped) = (0usize, 0usize);
    let (mut worst_a, mut worst_b) = (0.0f64, 0.0f64);
    for ((y, x), g) in ga.indexed_iter() {
        assert_eq!(
            g.is_finite(),
            got.0[[y, x]].is_finite(),
            "mask at ({y},{x})"
        );
        if !g.is_finite() {
            continue;
        }
        let ea = (got.0[[y, x]] - g).abs() / g.abs();
        let eb = (got.1[[y, x]] - gb[[y, x]]).abs() / maxb;
        if ea <= tol && eb <= tol {
            worst_a = worst_a.max(ea);
            worst_b = worst_b.max(eb);
            continue;
        }
        let near = job.angles().iter().any(|&ang| {
            let (py, px) = geom.position(y as f64, x as f64, ang);
            (py - py.round()).abs() < 1e-9 || (px - px.round()).abs() < 1e-9
        });
        let at_planet = (37..=42).contains(&y) && (42..=48).contains(&x);
        if near && !at_planet {
            trapped += 1;
        } else {
            over += 1;
            eprintln!("({y},{x}) a err {ea:.3e} b err {eb:.3e}");
        }
    }
    eprintln!(
        "golden {prefix}: {trapped} float-trap pixels, {over} others above {tol}; elsewhere max \
         rel Δa {worst_a:.2e}, max |Δb|/max|b| {worst_b:.2e}"
    );
    assert_eq!(
        over, 0,
        "pixels above {tol} not explained by the float trap"
    );
    assert!(trapped <= max_trapped, "{trapped} float-trap pixels");
}

/// a and b at `phi0s`: same NaN positions, a within `tol` relative, b within `tol`·max|b|.
fn check_points(phi0s: &[(usize, usize)], cpu: (&[f64], &[f64]), dev: (&[f64], &[f64]), tol: f64) {
    let maxb = cpu
        .1
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let (mut wa, mut wb) = (0.0f64, 0.0f64);
    assert_eq!(dev.0.len(), phi0s.len());
    for (i, p) in phi0s.iter().enumerate() {
        assert_eq!(cpu.0[i].is_finite(), dev.0[i].is_finite(), "{p:?}");
        if cpu.0[i].is_finite() {
            wa = wa.max((cpu.0[i] - dev.0[i]).abs() / cpu.0[i].abs());
            wb = wb.max((cpu.1[i] - dev.1[i]).abs() / maxb);
        }
    }
    eprintln!("ab_at {} positions: a {wa:.3e}, b {wb:.3e}", phi0s.len());
    assert!(wa <= tol && wb <= tol, "ab_at: {wa:e} {wb:e}");
}

/// Spline5 templates: device vs CPU in both variants; skipped while the CPU returns
/// `Unsupported` for them.
fn check_spline5(dev: &dyn PacoBackend, tol: f64, label: &str) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params_sub(Variant::Vip, SubPixel::Spline5);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    match open::paco_backend(Device::Cpu).unwrap().ab_maps(&job) {
        Err(bridge_core::BridgeError::Unsupported(m)) => {
            eprintln!("skipping: the CPU has no Spline5 templates yet ({m})");
            let e = dev.ab_maps(&job).unwrap_err();
            assert!(matches!(e, bridge_core::BridgeError::Unsupported(_)), "{e}");
        }
        Err(e) => panic!("CPU Spline5: {e}"),
        Ok(_) => check_fixture_sub(dev, tol, label, SubPixel::Spline5),
    }
}

/// Bit-identical maps with the default and a tiny `max_tile_bytes` (many pair batches), with
/// per-pair and table templates, and `ab_at` with per-pair templates vs the CPU.
fn check_batches_and_ab_at(dev: &dyn PacoBackend, tol: f64) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    // a cropped cube keeps the exact-template runs short
    let cube = cube.slice(ndarray::s![.., 8..56, 8..56]).to_owned();
    for sub in [SubPixel::VipFft, SubPixel::Table { q: 8 }] {
        let mut p = params_sub(Variant::Vip, sub);
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let full = dev.ab_maps(&job).unwrap();
        p.max_tile_bytes = 64 << 10;
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let small = dev.ab_maps(&job).unwrap();
        let cpu = open::paco_backend(Device::Cpu)
            .unwrap()
            .ab_maps(&job)
            .unwrap();
        let (wa, wb, finite) = compare(&cpu, &small);
        eprintln!("batches {sub:?}: {finite} finite, a {wa:.3e}, b {wb:.3e}");
        assert!(finite > 500);
        assert!(wa <= tol && wb <= tol, "{wa:e} {wb:e}");
        for (x, y) in full
            .0
            .iter()
            .zip(&small.0)
            .chain(full.1.iter().zip(&small.1))
        {
            assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
        }
    }
    let p = params_sub(Variant::Paper, SubPixel::VipFft);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let phi0s = [
        (31, 37),
        (12, 22),
        (0, 0),
        (24, 24),
        (42, 9),
        (31, 37),
        (20, 30),
    ];
    let (ca, cb) = open::paco_backend(Device::Cpu)
        .unwrap()
        .ab_at(&job, &phi0s)
        .unwrap();
    let (da, db) = dev.ab_at(&job, &phi0s).unwrap();
    check_points(&phi0s, (&ca, &cb), (&da, &db), tol);
    assert!(da[2].is_nan(), "the border has no valid trajectory");
}

/// R = 5 (K = 81) and R = 6 (K = 113) on a cropped cube: device vs CPU without templates, with
/// table templates and (R = 5, `ab_at`) per-pair templates; also with a tiny
/// `max_tile_bytes` (one scratch row per launch).
fn check_large_patches(dev: &dyn PacoBackend, tol: f64, label: &str) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let cube = cube.slice(ndarray::s![.., 12..52, 12..52]).to_owned();
    for r in [5usize, 6] {
        for (sub, tiny) in [
            (SubPixel::Off, false),
            (SubPixel::Off, true),
            (SubPixel::Table { q: 8 }, false),
        ] {
            let mut p = params_sub(Variant::Vip, sub);
            p.psf_rad = r;
            if tiny {
                p.max_tile_bytes = 1;
            }
            let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
            let cpu = open::paco_backend(Device::Cpu)
                .unwrap()
                .ab_maps(&job)
                .unwrap();
            let t0 = std::time::Instant::now();
            let got = dev.ab_maps(&job).unwrap();
            let dt = t0.elapsed().as_secs_f64();
            let (wa, wb, finite) = compare(&cpu, &got);
            eprintln!(
                "{label} R={r} K={} {sub:?} tiny={tiny}: {finite} finite, a {wa:.3e}, b {wb:.3e}, {dt:.2} s",
                job.disk().len()
            );
            assert!(finite > 100, "{finite}");
            assert!(wa <= tol && wb <= tol, "R={r} {sub:?}: {wa:e} {wb:e}");
        }
    }
    let mut p = params_sub(Variant::Paper, SubPixel::VipFft);
    p.psf_rad = 5;
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let phi0s = [(27, 33), (10, 20), (20, 28), (0, 0)];
    let (ca, cb) = open::paco_backend(Device::Cpu)
        .unwrap()
        .ab_at(&job, &phi0s)
        .unwrap();
    let (da, db) = dev.ab_at(&job, &phi0s).unwrap();
    check_points(&phi0s, (&ca, &cb), (&da, &db), tol);
}

/// `EdgeRule::Disk`: device vs CPU without and with sub-pixel templates; more valid pixels than
/// with the box rule.
fn check_edge_disk(dev: &dyn PacoBackend, tol: f64, label: &str) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    for sub in [SubPixel::Off, SubPixel::Table { q: 8 }] {
        let mut p = params_sub(Variant::Vip, sub);
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let boxed = open::paco_backend(Device::Cpu)
            .unwrap()
            .ab_maps(&job)
            .unwrap();
        p.edge = EdgeRule::Disk;
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let cpu = open::paco_backend(Device::Cpu)
            .unwrap()
            .ab_maps(&job)
            .unwrap();
        let got = dev.ab_maps(&job).unwrap();
        let (wa, wb, finite) = compare(&cpu, &got);
        let nbox = boxed.0.iter().filter(|v| v.is_finite()).count();
        eprintln!("{label} Disk {sub:?}: {finite} finite (box: {nbox}), a {wa:.3e}, b {wb:.3e}");
        assert!(finite > nbox, "the disk rule keeps more pixels");
        assert!(wa <= tol && wb <= tol, "{sub:?}: {wa:e} {wb:e}");
    }
}

/// `Rounding::Nearest` with table templates through `ab_at`, against the CPU.
fn check_nearest_ab_at(dev: &dyn PacoBackend, tol: f64) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let mut p = params_sub(Variant::Vip, SubPixel::Table { q: 16 });
    p.rounding = Rounding::Nearest;
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let phi0s: Vec<(usize, usize)> = (0..64).flat_map(|y| [(y, 45), (y, 20)]).collect();
    let (ca, cb) = open::paco_backend(Device::Cpu)
        .unwrap()
        .ab_at(&job, &phi0s)
        .unwrap();
    let (da, db) = dev.ab_at(&job, &phi0s).unwrap();
    check_points(&phi0s, (&ca, &cb), (&da, &db), tol);
}

/// R = 7 (K = 149) is beyond every kernel variant: a typed error, never a silent CPU run.
fn check_over_kmax_big(dev: &dyn PacoBackend) {
    let (cube, angles, psf) = (cube(), angles(), psf());
    let mut p = params(Variant::Vip);
    p.psf_rad = 7;
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let e = dev.ab_maps(&job).unwrap_err();
    assert!(matches!(e, bridge_core::BridgeError::Unsupported(_)), "{e}");
    assert!(dev.ab_at(&job, &[(40, 45)]).is_err());
}

/// 63×61 frames: odd sizes, non-square, star at the centre pixel (host geometry).
fn check_odd_frame(dev: &dyn PacoBackend, tol: f64) {
    let cube = cube();
    let cube = cube.slice(ndarray::s![.., 0..63, 1..62]).to_owned();
    let (angles, psf) = (angles(), psf());
    for sub in [SubPixel::Off, SubPixel::Table { q: 8 }] {
        let p = params_sub(Variant::Paper, sub);
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let cpu = open::paco_backend(Device::Cpu)
            .unwrap()
            .ab_maps(&job)
            .unwrap();
        let got = dev.ab_maps(&job).unwrap();
        let (wa, wb, finite) = compare(&cpu, &got);
        eprintln!("odd {sub:?}: {finite} finite, a {wa:.3e}, b {wb:.3e}");
        assert!(finite > 1000);
        assert!(wa <= tol && wb <= tol, "{wa:e} {wb:e}");
    }
}

/// `backend_for(device)` gives the back end named `name`; `batch_size` never changes results.
fn check_backend_for_and_small_batches(device: Device, name: &str) {
    let dev = open::paco_backend(device).unwrap();
    assert_eq!(dev.name(), name);
    let (cube, angles, psf) = (cube(), angles(), psf());
    let mut p = params(Variant::Vip);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let full = dev.ab_maps(&job).unwrap();
    p.batch_size = 777;
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let small = dev.ab_maps(&job).unwrap();
    for (x, y) in full
        .0
        .iter()
        .zip(&small.0)
        .chain(full.1.iter().zip(&small.1))
    {
        assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
    }
}

/// The same suite for every device back end (run per device, like the workspace's
/// `device_tests!`): `$ctor(precision)` gives the back end, or `None` to skip.
macro_rules! paco_device_suite {
    ($module:ident, $feature:literal, $ctor:path) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            const LABEL: &str = $feature;

            fn tol_of(fp64: bool) -> f64 {
                if fp64 { 1e-9 } else { 1e-4 }
            }

            #[test]
            fn f64_matches_cpu() {
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                check_fixture(&dev, 1e-9, &format!("{LABEL} f64"));
            }

            /// The knobs are a value of the back end: a `paco_stats` group smaller than the
            /// four solve strands, another per-pixel group and small device batches, set by
            /// value next to the defaults in this one process, give the same bits, with and
            /// without templates, R = 4 and R = 6 (`COV_GLOBAL`: K = 113, more columns than
            /// work items); and so do both Cholesky updates (`ARRAYBRIDGE_PACO_CHOL`: a column
            /// per work item, rows over the group) with groups of 1, 3, 32 and 64.
            #[test]
            fn knobs_set_by_value_change_no_bit() {
                use bridge_core::tuning::Tuning;
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                let knobs = |kv: &[(&str, &str)]| {
                    kv.iter()
                        .try_fold(Tuning::default(), |t, (k, v)| t.with(k, v))
                        .unwrap()
                };
                let t = knobs(&[
                    ("ARRAYBRIDGE_PACO_STATS_WG", "3"),
                    ("ARRAYBRIDGE_PACO_LINE_WG", "32"),
                    ("ARRAYBRIDGE_PACO_DEVICE_BATCH", "777"),
                ]);
                let tuned = dev.clone().with_tuning(t.clone());
                assert_eq!(tuned.tuning(), &t);
                let mut tunings = vec![tuned];
                for (wg, chol) in [
                    ("64", "columns"),
                    ("32", "columns"),
                    ("1", "columns"),
                    ("64", "rows"),
                    ("3", "rows"),
                ] {
                    tunings.push(dev.clone().with_tuning(knobs(&[
                        ("ARRAYBRIDGE_PACO_STATS_WG", wg),
                        ("ARRAYBRIDGE_PACO_CHOL", chol),
                    ])));
                }
                let (cube, angles, psf) = (cube(), angles(), psf());
                for (r, sub) in [
                    (4, SubPixel::Off),
                    (4, SubPixel::Table { q: 8 }),
                    (6, SubPixel::Off),
                ] {
                    let mut p = params_sub(Variant::Vip, sub);
                    p.psf_rad = r;
                    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
                    let (a, b) = dev.ab_maps(&job).unwrap();
                    for tuned in &tunings {
                        let (ta, tb) = tuned.ab_maps(&job).unwrap();
                        let what = format!("R = {r} {sub:?} {:?}", tuned.tuning());
                        same_bits(a.as_slice().unwrap(), ta.as_slice().unwrap(), &what);
                        same_bits(b.as_slice().unwrap(), tb.as_slice().unwrap(), &what);
                    }
                }
            }

            /// `ARRAYBRIDGE_PACO_TRAJ`: the trajectories of the path without templates
            /// computed on the device (`device`: certified roundings, the undecided entries
            /// computed on the host; `wide`: every entry within 1/1024 pixel of a boundary left
            /// to the host) and on the host give the CPU's maps bit for bit in double (and
            /// `ab_at` the host path's bits: the CPU's `ab_at` sums in another order),
            /// for both roundings and both edge rules, an odd frame (VIP's half-pixel centre),
            /// the fixture's angles (the first is 0: the identity rotation puts every
            /// coordinate of that frame on a rounding boundary), shifted by 0.3° and with
            /// multiples of 90° (coordinates on boundaries again), and device batches of 333
            /// positions.
            #[test]
            fn trajectory_modes_give_the_cpu_bits() {
                use bridge_core::tuning::Tuning;
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                let mode = |m: &str| {
                    dev.clone().with_tuning(
                        Tuning::default()
                            .with("ARRAYBRIDGE_PACO_TRAJ", m)
                            .and_then(|t| t.with("ARRAYBRIDGE_PACO_DEVICE_BATCH", "333"))
                            .unwrap(),
                    )
                };
                let full = cube();
                let odd = full.slice(ndarray::s![.., 0..63, 1..62]).to_owned();
                let base = angles();
                let shifted = base.mapv(|a| a + 0.3);
                let mut quarter = base.clone();
                for (i, a) in quarter.iter_mut().enumerate().step_by(5) {
                    *a = 90.0 * (i % 4) as f64 - 180.0;
                }
                let psf = psf();
                let cpu = open::paco_backend(Device::Cpu).unwrap();
                let phi0s = [(20, 27), (8, 18), (30, 14), (0, 0), (32, 32), (31, 40)];
                let mut finite = 0;
                for (cube, angles) in [
                    (&full, &base),
                    (&odd, &base),
                    (&full, &shifted),
                    (&full, &quarter),
                ] {
                    for rounding in [Rounding::Trunc, Rounding::Nearest] {
                        for edge in [EdgeRule::Box, EdgeRule::Disk] {
                            let mut p = params(Variant::Vip);
                            p.rounding = rounding;
                            p.edge = edge;
                            let job =
                                PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
                            let (ca, cb) = cpu.ab_maps(&job).unwrap();
                            let (pa, pb) = mode("host").ab_at(&job, &phi0s).unwrap();
                            finite += ca.iter().filter(|v| v.is_finite()).count();
                            for m in ["device", "wide", "host", "auto"] {
                                let what = format!("{m} {rounding:?} {edge:?}");
                                let d = mode(m);
                                let (da, db) = d.ab_maps(&job).unwrap();
                                same_bits(ca.as_slice().unwrap(), da.as_slice().unwrap(), &what);
                                same_bits(cb.as_slice().unwrap(), db.as_slice().unwrap(), &what);
                                let (qa, qb) = d.ab_at(&job, &phi0s).unwrap();
                                same_bits(&pa, &qa, &what);
                                same_bits(&pb, &qb, &what);
                            }
                        }
                    }
                }
                assert!(finite > 16 * 1000, "{finite} finite values");
            }

            /// `ARRAYBRIDGE_PACO_COV` (and `ARRAYBRIDGE_PACO_LAG_ORDER`, alternately lags and
            /// pixels first): the covariances read from `paco_lag`'s lag table (auto
            /// and `lag`, in one table, in tables of a few rows under a small
            /// `max_tile_bytes` (R = 4: 4 and 23 rows a table, R = 5: 8), one row at a time
            /// under a 24 KiB or 1-byte budget; every `ARRAYBRIDGE_PACO_LAG_LAYOUT`: the
            /// frame-major or pixel-major cube, the table lag-major or pixel-major) and computed directly
            /// give the same bits, without and with templates, R = 4 and R = 5 (`COV_GLOBAL`),
            /// in double and in float, maps and `ab_at`.
            #[test]
            fn covariance_modes_give_the_same_bits() {
                use bridge_core::tuning::Tuning;
                let Some(dev) = $ctor(Precision::Auto) else {
                    return;
                };
                // the lag-major layouts alternate the grid's order (ARRAYBRIDGE_PACO_LAG_ORDER)
                let order = std::cell::Cell::new(false);
                let mode = |m: &str, layout: &str| {
                    order.set(!order.get());
                    dev.clone().with_tuning(
                        Tuning::default()
                            .with("ARRAYBRIDGE_PACO_COV", m)
                            .and_then(|t| t.with("ARRAYBRIDGE_PACO_LAG_LAYOUT", layout))
                            .and_then(|t| {
                                t.with(
                                    "ARRAYBRIDGE_PACO_LAG_ORDER",
                                    if order.get() { "lags" } else { "pixels" },
                                )
                            })
                            .unwrap(),
                    )
                };
                let (cube, angles, psf) = (cube(), angles(), psf());
                let cube = cube.slice(ndarray::s![.., 10..54, 10..54]).to_owned();
                let mut precisions = vec![Precision::F32];
                if dev.has_fp64() {
                    precisions.push(Precision::F64);
                }
                for prec in precisions {
                    for (r, sub) in [
                        (4usize, SubPixel::Off),
                        (4, SubPixel::Table { q: 8 }),
                        (5, SubPixel::Off),
                    ] {
                        let mut p = params_sub(Variant::Vip, sub);
                        p.psf_rad = r;
                        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
                        let direct = mode("direct", "auto").with_precision(prec);
                        let (da, db) = direct.ab_maps(&job).unwrap();
                        let phi0s = [(20, 27), (8, 18), (30, 14), (0, 0), (20, 27)];
                        let (pa, pb) = direct.ab_at(&job, &phi0s).unwrap();
                        assert!(da.iter().filter(|v| v.is_finite()).count() > 200);
                        for (m, layout, budget) in [
                            ("auto", "frame", 256usize << 20),
                            ("auto", "pixel", 256 << 20),
                            ("auto", "frame", 24 << 10),
                            ("lag", "pixel", 24 << 10),
                            // chunks of several rows, fewer than the frame's
                            ("auto", "frame", 400_000),
                            ("auto", "pixel", 1_000_000),
                            ("auto", "mixed", 256 << 20),
                            ("lag", "mixed", 400_000),
                            ("lag", "frame", 1),
                            ("lag", "pixel", 1),
                        ] {
                            {
                                let mut p = p.clone();
                                p.max_tile_bytes = budget;
                                let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p)
                                    .unwrap();
                                let dev = mode(m, layout).with_precision(prec);
                                let what = format!(
                                    "{prec:?} R={r} {sub:?} {m} {layout} {budget} B lags first \
                                     {}",
                                    order.get()
                                );
                                let (a, b) = dev.ab_maps(&job).unwrap();
                                same_bits(a.as_slice().unwrap(), da.as_slice().unwrap(), &what);
                                same_bits(b.as_slice().unwrap(), db.as_slice().unwrap(), &what);
                                let (qa, qb) = dev.ab_at(&job, &phi0s).unwrap();
                                same_bits(&qa, &pa, &what);
                                same_bits(&qb, &pb, &what);
                            }
                        }
                    }
                }
            }

            #[test]
            fn f32_matches_cpu() {
                let Some(dev) = $ctor(Precision::F32) else {
                    return;
                };
                check_fixture(&dev, 1e-4, &format!("{LABEL} f32"));
            }

            #[test]
            fn subpixel_table_matches_cpu() {
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                check_fixture_sub(
                    &dev,
                    1e-9,
                    &format!("{LABEL} f64"),
                    SubPixel::Table { q: 32 },
                );
                let dev = dev.with_precision(Precision::F32);
                check_fixture_sub(
                    &dev,
                    1e-4,
                    &format!("{LABEL} f32"),
                    SubPixel::Table { q: 32 },
                );
            }

            #[test]
            fn subpixel_nearest_ab_at_matches_cpu() {
                let Some(dev) = $ctor(Precision::Auto) else {
                    return;
                };
                check_nearest_ab_at(&dev, tol_of(dev.has_fp64()));
            }

            /// The exact VIP FFT shift on the device (per-pair templates computed on the host
            /// with the CPU's code): both variants against the CPU to 1e-12, and VIP 2.1.1's
            /// golden maps like the CPU golden tests (float-trap pixels explained the same way).
            #[test]
            fn subpixel_vipfft_matches_cpu_and_vip_golden() {
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                check_fixture_sub(&dev, 1e-12, &format!("{LABEL} f64"), SubPixel::VipFft);
                let (cube, angles, psf) = (cube(), angles(), psf());
                let p = params_sub(Variant::Vip, SubPixel::VipFft);
                let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
                let got = dev.ab_maps(&job).unwrap();
                check_golden(&job, &got, "vip211_fastpaco_synth_subpix", 1e-9, 70);
                let dev = dev.with_precision(Precision::F32);
                check_fixture_sub(&dev, 1e-4, &format!("{LABEL} f32"), SubPixel::VipFft);
            }

            /// `SubPixel::Spline5` through the same per-pair template path.
            #[test]
            fn subpixel_spline5_matches_cpu() {
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                check_spline5(&dev, 1e-12, &format!("{LABEL} f64"));
            }

            /// Per-pair and table templates in many small batches (a tiny `max_tile_bytes`)
            /// give bit-identical maps, and `ab_at` (duplicates, NaN border) equals the CPU.
            #[test]
            fn subpixel_batches_and_ab_at() {
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                check_batches_and_ab_at(&dev, 1e-12);
            }

            /// Patches larger than the local-memory KMAX (R = 5: K = 81, R = 6: K = 113; K×K
            /// matrices in global scratch memory), with and without sub-pixel templates.
            #[test]
            fn large_patches_match_cpu() {
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                check_large_patches(&dev, 1e-12, &format!("{LABEL} f64"));
                let dev = dev.with_precision(Precision::F32);
                check_large_patches(&dev, 1e-4, &format!("{LABEL} f32"));
            }

            /// Beyond KMAX_BIG (R = 7, K = 149): a typed error, never a silent CPU run.
            #[test]
            fn patch_over_kmax_big_is_an_error_not_a_fallback() {
                let Some(dev) = $ctor(Precision::Auto) else {
                    return;
                };
                check_over_kmax_big(&dev);
            }

            /// `EdgeRule::Disk` (statistics up to R pixels from the border): device vs CPU.
            #[test]
            fn edge_disk_matches_cpu() {
                let Some(dev) = $ctor(Precision::F64) else {
                    return;
                };
                check_edge_disk(&dev, 1e-12, &format!("{LABEL} f64"));
            }

            #[test]
            fn odd_frame_matches_cpu() {
                let Some(dev) = $ctor(Precision::Auto) else {
                    return;
                };
                check_odd_frame(&dev, tol_of(dev.has_fp64()));
            }

            #[test]
            fn ab_at_matches_cpu() {
                let Some(dev) = $ctor(Precision::Auto) else {
                    return;
                };
                check_ab_at(&dev, tol_of(dev.has_fp64()));
            }

            /// `backend_for` picks this back end; `batch_size` never changes results.
            #[test]
            fn backend_for_and_small_batches() {
                let Some(dev) = $ctor(Precision::Auto) else {
                    return;
                };
                let dev: Device = format!("{}:0", dev.name()).parse().unwrap();
                check_backend_for_and_small_batches(dev, LABEL);
            }
        }
    };
}

paco_device_suite!(opencl, "opencl", super::opencl);
paco_device_suite!(cuda, "cuda", super::cuda);

/// PoCL wall time of the device maps on the 61×100×100 synthetic cube (VIP), without and with
/// sub-pixel templates (table q = 32, exact VIP FFT shift, patch radius 6), against the CPU
/// backend.
#[cfg(feature = "opencl")]
#[test]
#[ignore = "timing; run with --ignored --nocapture"]
fn opencl_timing_61x100x100() {
    let Some(dev) = opencl(Precision::Auto) else {
        return;
    };
    let (cube, angles, psf) = algorithms::paco::bench::synthetic_adi(61, 100, 7);
    let cpu = open::paco_backend(Device::Cpu).unwrap();
    let best_of = |b: &dyn PacoBackend, job: &PacoJob<'_>, reps: usize| {
        let _ = b.ab_maps(job).unwrap(); // warm-up (program build)
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t0 = std::time::Instant::now();
            let _ = b.ab_maps(job).unwrap();
            best = best.min(t0.elapsed().as_secs_f64());
        }
        best
    };
    for (sub, r) in [
        (SubPixel::Off, 4),
        (SubPixel::Table { q: 32 }, 4),
        (SubPixel::VipFft, 4),
        (SubPixel::Off, 6),
    ] {
        let mut p = params_sub(Variant::Vip, sub);
        p.psf_norm = PsfNorm::None;
        p.psf_rad = r;
        let reps = if sub == SubPixel::VipFft { 1 } else { 3 };
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        for prec in [Precision::F64, Precision::F32] {
            if prec == Precision::F64 && !dev.has_fp64() {
                continue;
            }
            let d = dev.clone().with_precision(prec);
            let best = best_of(&d, &job, reps);
            eprintln!(
                "opencl {prec:?} {sub:?} R={r} 61x100x100 ab_maps best of {reps}: {best:.3} s"
            );
        }
        let best = best_of(cpu.as_ref(), &job, reps);
        eprintln!("cpu {sub:?} R={r} 61x100x100 ab_maps best of {reps}: {best:.3} s");
    }
}

#[cfg(feature = "cuda")]
#[test]
fn nvrtc_compiles_every_paco_kernel() {
    for src in algorithms::paco::gpu_kernels::ALL {
        match bridge_cuda::kernel::compile_check(src) {
            Ok(true) => eprintln!("nvrtc: {} compiled", src.name),
            Ok(false) => test_support::require::skip(
                Some(test_support::require::NVRTC),
                "libnvrtc",
                src.name,
            ),
            Err(e) => panic!("{}: {e}", src.name),
        }
    }
}

/// The same checks again in a child process with every PACO knob moved off its default: a
/// `paco_stats` group smaller than the four solve strands (3), other per-pixel groups, small
/// device batches (many batches), the covariances computed directly, the trajectories on the
/// device (PoCL's default is the host); on CUDA also synchronous launches, every upload staged
/// and on the kernels' stream. The maps stay bit-identical to the CPU's in double.
#[cfg(any(feature = "opencl", feature = "cuda"))]
#[test]
fn maps_do_not_depend_on_the_knobs() {
    let mut tests = Vec::new();
    for dev in [
        #[cfg(feature = "opencl")]
        "opencl",
        #[cfg(feature = "cuda")]
        "cuda",
    ] {
        for t in [
            "f64_matches_cpu",
            "ab_at_matches_cpu",
            "backend_for_and_small_batches",
            "large_patches_match_cpu",
        ] {
            tests.push(format!("{dev}::{t}"));
        }
    }
    let tests: Vec<&str> = tests.iter().map(String::as_str).collect();
    let out = test_support::rerun_with_env(
        &[
            ("ARRAYBRIDGE_PACO_STATS_WG", "3"),
            ("ARRAYBRIDGE_PACO_LINE_WG", "32"),
            ("ARRAYBRIDGE_PACO_DEVICE_BATCH", "257"),
            ("ARRAYBRIDGE_CUDA_LAUNCH", "sync"),
            ("ARRAYBRIDGE_DIRECT_COPY_KB", "0"),
            ("ARRAYBRIDGE_PACO_COV", "direct"),
            ("ARRAYBRIDGE_CUDA_UPLOAD", "shared"),
            ("ARRAYBRIDGE_PACO_TRAJ", "device"),
        ],
        &tests,
    );
    // in double the maps are the CPU's bit for bit (the worst errors print as zero)
    for line in out
        .lines()
        .filter(|l| l.contains(" f64 ") && l.contains("worst"))
    {
        assert!(
            line.contains("a worst rel 0.000e0, b worst 0.000e0"),
            "{line}"
        );
    }
}
