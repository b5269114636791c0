#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(
    not(any(feature = "opencl", feature = "cuda")),
    allow(dead_code, unused_imports)
)]
//! PACO on OpenCL and CUDA against the CPU backend (one portable kernel source).
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

mod paco_common;

#[cfg(any(feature = "opencl", feature = "cuda"))]
use algorithms::paco::GpuPrecision;
use algorithms::paco::{
    PacoBackend, PacoJob, PacoParams, PsfNorm, Rounding, SubPixel, Variant, backend_for,
};
use bridge_core::Device;
use ndarray::Array2;
use paco_common::*;

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

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
fn opencl(precision: GpuPrecision) -> Option<algorithms::paco::OpenClPaco> {
    match algorithms::paco::OpenClPaco::new(0) {
        Ok(b) => {
            if precision == GpuPrecision::F64 && !b.has_fp64() {
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
fn cuda(precision: GpuPrecision) -> Option<algorithms::paco::CudaPaco> {
    match algorithms::paco::CudaPaco::new(0) {
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
        let cpu = backend_for(Device::Cpu).unwrap().ab_maps(&job).unwrap();
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
    let (ca, cb) = backend_for(Device::Cpu)
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

#[cfg(feature = "opencl")]
#[test]
fn opencl_f64_matches_cpu() {
    let Some(dev) = opencl(GpuPrecision::F64) else {
        return;
    };
    check_fixture(&dev, 1e-9, "opencl f64");
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_f32_matches_cpu() {
    let Some(dev) = opencl(GpuPrecision::F32) else {
        return;
    };
    check_fixture(&dev, 1e-4, "opencl f32");
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_subpixel_table_f64_matches_cpu() {
    let Some(dev) = opencl(GpuPrecision::F64) else {
        return;
    };
    check_fixture_sub(&dev, 1e-9, "opencl f64", SubPixel::Table { q: 32 });
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_subpixel_table_f32_matches_cpu() {
    let Some(dev) = opencl(GpuPrecision::F32) else {
        return;
    };
    check_fixture_sub(&dev, 1e-4, "opencl f32", SubPixel::Table { q: 32 });
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_subpixel_nearest_ab_at_matches_cpu() {
    let Some(dev) = opencl(GpuPrecision::Auto) else {
        return;
    };
    let (cube, angles, psf) = (cube(), angles(), psf());
    let mut p = params_sub(Variant::Vip, SubPixel::Table { q: 16 });
    p.rounding = Rounding::Nearest;
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let phi0s: Vec<(usize, usize)> = (0..64).flat_map(|y| [(y, 45), (y, 20)]).collect();
    let (ca, cb) = backend_for(Device::Cpu)
        .unwrap()
        .ab_at(&job, &phi0s)
        .unwrap();
    let (da, db) = dev.ab_at(&job, &phi0s).unwrap();
    let tol = if dev.has_fp64() { 1e-9 } else { 1e-4 };
    let maxb = cb
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    for i in 0..phi0s.len() {
        assert_eq!(ca[i].is_finite(), da[i].is_finite(), "{:?}", phi0s[i]);
        if ca[i].is_finite() {
            assert!(
                (ca[i] - da[i]).abs() <= tol * ca[i].abs(),
                "a at {:?}",
                phi0s[i]
            );
            assert!((cb[i] - db[i]).abs() <= tol * maxb, "b at {:?}", phi0s[i]);
        }
    }
}

/// The exact VIP FFT shift has no device kernels: a typed error, never a silent CPU run.
#[cfg(feature = "opencl")]
#[test]
fn opencl_exact_fft_subpixel_is_an_error_not_a_fallback() {
    let Some(dev) = opencl(GpuPrecision::F64) else {
        return;
    };
    let (cube, angles, psf) = (cube(), angles(), psf());
    let p = params_sub(Variant::Vip, SubPixel::VipFft);
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let e = dev.ab_maps(&job).unwrap_err();
    assert!(matches!(e, bridge_core::BridgeError::Unsupported(_)), "{e}");
    assert!(dev.ab_at(&job, &[(40, 45)]).is_err());
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_odd_frame_matches_cpu() {
    let Some(dev) = opencl(GpuPrecision::Auto) else {
        return;
    };
    // 63×61 frames: odd sizes, non-square, star at the centre pixel (host geometry)
    let cube = cube();
    let cube = cube.slice(ndarray::s![.., 0..63, 1..62]).to_owned();
    let (angles, psf) = (angles(), psf());
    let tol = if dev.has_fp64() { 1e-9 } else { 1e-4 };
    for sub in [SubPixel::Off, SubPixel::Table { q: 8 }] {
        let p = params_sub(Variant::Paper, sub);
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        let cpu = backend_for(Device::Cpu).unwrap().ab_maps(&job).unwrap();
        let got = dev.ab_maps(&job).unwrap();
        let (wa, wb, finite) = compare(&cpu, &got);
        eprintln!("odd {sub:?}: {finite} finite, a {wa:.3e}, b {wb:.3e}");
        assert!(finite > 1000);
        assert!(wa <= tol && wb <= tol, "{wa:e} {wb:e}");
    }
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_ab_at_matches_cpu() {
    let Some(dev) = opencl(GpuPrecision::Auto) else {
        return;
    };
    check_ab_at(&dev, if dev.has_fp64() { 1e-9 } else { 1e-4 });
}

#[cfg(feature = "opencl")]
#[test]
fn opencl_backend_for_and_small_batches() {
    let Some(_) = opencl(GpuPrecision::Auto) else {
        return;
    };
    // backend_for picks the OpenCL backend; batch_size never changes results.
    let dev = backend_for(Device::OpenCl(0)).unwrap();
    assert_eq!(dev.name(), "opencl");
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

/// PoCL wall time of the device maps on the 61×100×100 synthetic cube (VIP), without and with
/// sub-pixel table templates (q = 32), against the CPU backend.
#[cfg(feature = "opencl")]
#[test]
#[ignore = "timing; run with --ignored --nocapture"]
fn opencl_timing_61x100x100() {
    let Some(dev) = opencl(GpuPrecision::Auto) else {
        return;
    };
    let (cube, angles, psf) = algorithms::paco::bench::synthetic_adi(61, 100, 7);
    let cpu = backend_for(Device::Cpu).unwrap();
    let best_of = |b: &dyn PacoBackend, job: &PacoJob<'_>| {
        let _ = b.ab_maps(job).unwrap(); // warm-up (program build)
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t0 = std::time::Instant::now();
            let _ = b.ab_maps(job).unwrap();
            best = best.min(t0.elapsed().as_secs_f64());
        }
        best
    };
    for sub in [SubPixel::Off, SubPixel::Table { q: 32 }] {
        let mut p = params_sub(Variant::Vip, sub);
        p.psf_norm = PsfNorm::None;
        let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &p).unwrap();
        for prec in [GpuPrecision::F64, GpuPrecision::F32] {
            if prec == GpuPrecision::F64 && !dev.has_fp64() {
                continue;
            }
            let d = dev.clone().with_precision(prec);
            let best = best_of(&d, &job);
            eprintln!("opencl {prec:?} {sub:?} 61x100x100 ab_maps best of 3: {best:.3} s");
        }
        let best = best_of(cpu.as_ref(), &job);
        eprintln!("cpu {sub:?} 61x100x100 ab_maps best of 3: {best:.3} s");
    }
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_f64_matches_cpu() {
    let Some(dev) = cuda(GpuPrecision::F64) else {
        return;
    };
    check_fixture(&dev, 1e-9, "cuda f64");
    check_ab_at(&dev, 1e-9);
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_f32_matches_cpu() {
    let Some(dev) = cuda(GpuPrecision::F32) else {
        return;
    };
    check_fixture(&dev, 1e-4, "cuda f32");
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_subpixel_table_matches_cpu() {
    let Some(dev) = cuda(GpuPrecision::F64) else {
        return;
    };
    check_fixture_sub(&dev, 1e-9, "cuda f64", SubPixel::Table { q: 32 });
    let dev = dev.with_precision(GpuPrecision::F32);
    check_fixture_sub(&dev, 1e-4, "cuda f32", SubPixel::Table { q: 32 });
}

#[cfg(feature = "cuda")]
#[test]
fn nvrtc_compiles_every_paco_kernel() {
    for src in algorithms::paco::gpu_kernels::ALL {
        match bridge_cuda::kernel::compile_check(src) {
            Ok(true) => eprintln!("nvrtc: {} compiled", src.name),
            Ok(false) => eprintln!("skipping: libnvrtc not found ({})", src.name),
            Err(e) => panic!("{}: {e}", src.name),
        }
    }
}
