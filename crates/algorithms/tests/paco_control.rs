//! The `control` of PACO, `unbiased_flux` and linking: a cancelled run returns
//! `BridgeError::Cancelled` on every path (the CPU's fast and sub-pixel paths, OpenCL on PoCL,
//! several devices), a run not cancelled counts its work to the total it announced and gives
//! the results it gave without a control, and cancelling from another thread stops a run well
//! before it would end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod open;
mod paco_common;

use std::time::{Duration, Instant};

use algorithms::paco::{PacoParams, PsfNorm, SubPixel, paco, paco_on_device};
use algorithms::synth::adi::synthetic_adi;
use bridge_core::control::Control;
use bridge_core::{BridgeError, Device};
use paco_common::same;

fn params(subpixel: SubPixel) -> PacoParams {
    PacoParams {
        psf_norm: PsfNorm::Factor(9.54),
        subpixel,
        max_tile_bytes: 1 << 16,
        ..Default::default()
    }
}

#[test]
fn a_cancelled_run_is_an_error_and_a_run_counts_its_rows() {
    let (cube, angles, psf) = synthetic_adi(10, 28, 5);
    for sub in [SubPixel::Off, SubPixel::Table { q: 4 }] {
        let plain = paco(cube.view(), angles.view(), psf.view(), &params(sub)).unwrap();
        let control = Control::new();
        let p = PacoParams {
            control: control.clone(),
            ..params(sub)
        };
        let maps = paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
        assert!(
            same(&maps.snr, &plain.snr),
            "{sub:?}: a control changes nothing"
        );
        let (done, total) = control.progress();
        assert!(total > 0 && done == total, "{sub:?}: {done} of {total}");
        control.cancel();
        let err = paco(cube.view(), angles.view(), psf.view(), &p).unwrap_err();
        assert!(
            matches!(err, BridgeError::Cancelled { .. }),
            "{sub:?}: {err}"
        );
        assert_eq!(err.to_string(), "PACO: cancelled");
    }
}

#[test]
fn a_cancelled_run_on_opencl_and_on_several_devices_is_an_error() {
    let (cube, angles, psf) = synthetic_adi(10, 28, 5);
    let control = Control::new();
    control.cancel();
    let p = PacoParams {
        control,
        ..params(SubPixel::Off)
    };
    let mut devices = vec![open::cpu()];
    devices.extend(open::try_open(Device::OpenCl(0)).ok());
    devices.extend(open::try_open(Device::Cuda(0)).ok());
    for dev in &devices {
        let err = paco_on_device(dev, cube.view(), angles.view(), psf.view(), &p).unwrap_err();
        assert!(
            matches!(err, BridgeError::Cancelled { .. }),
            "{dev:?}: {err}"
        );
    }
    let err = algorithms::paco::paco_on(
        cube.view(),
        angles.view(),
        psf.view(),
        &p,
        &devices,
        algorithms::paco::MultiPolicy::default(),
    )
    .unwrap_err();
    assert!(matches!(err, BridgeError::Cancelled { .. }), "{err}");
}

#[test]
fn cancelling_from_another_thread_stops_the_run_early() {
    let (cube, angles, psf) = synthetic_adi(40, 96, 5);
    let p = params(SubPixel::Off);
    let t0 = Instant::now();
    paco(cube.view(), angles.view(), psf.view(), &p).unwrap();
    let whole = t0.elapsed();
    let control = Control::new();
    let p = PacoParams {
        control: control.clone(),
        ..p
    };
    let t0 = Instant::now();
    let stopped = std::thread::scope(|s| {
        let run = s.spawn(|| paco(cube.view(), angles.view(), psf.view(), &p));
        // cancel once a few rows are done
        while control.progress().0 < 3 && !run.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        control.cancel();
        run.join().unwrap()
    });
    let took = t0.elapsed();
    let (done, total) = control.progress();
    assert!(
        matches!(stopped, Err(BridgeError::Cancelled { .. })),
        "{stopped:?}"
    );
    assert!(done < total, "stopped after {done} of {total} rows");
    eprintln!("whole run {whole:?}; cancelled after {done} of {total} rows in {took:?}");
}

#[test]
fn unbiased_flux_counts_its_positions_and_stops_when_cancelled() {
    use algorithms::paco::{FluxOptions, unbiased_flux};
    let (cube, angles, psf) = synthetic_adi(10, 28, 5);
    let control = Control::new();
    let p = PacoParams {
        control: control.clone(),
        ..params(SubPixel::Off)
    };
    let positions = [(10.0, 12.0), (14.0, 9.5), (6.0, 20.0)];
    let opts = FluxOptions::default();
    let plain = unbiased_flux(
        cube.view(),
        angles.view(),
        psf.view(),
        &params(SubPixel::Off),
        &positions,
        opts,
    )
    .unwrap();
    let est = unbiased_flux(cube.view(), angles.view(), psf.view(), &p, &positions, opts).unwrap();
    assert_eq!(
        format!("{plain:?}"),
        format!("{est:?}"),
        "a control changes nothing"
    );
    assert_eq!(control.progress(), (3, 3));
    control.cancel();
    let err =
        unbiased_flux(cube.view(), angles.view(), psf.view(), &p, &positions, opts).unwrap_err();
    assert_eq!(err.to_string(), "unbiased_flux: cancelled");
}

#[test]
fn link_counts_its_frames_and_stops_when_cancelled() {
    use algorithms::track::{LinkParams, link};
    let frames: Vec<i64> = (0..30).flat_map(|t| [t, t]).collect();
    let pos: Vec<[f64; 2]> = (0..30)
        .flat_map(|t| [[t as f64 * 0.5, 1.0], [20.0, t as f64 * 0.5]])
        .collect();
    let control = Control::new();
    let p = LinkParams {
        control: control.clone(),
        ..LinkParams::new(2.0, 0)
    };
    let (ids, _) = link(&frames, &pos, &p).unwrap();
    let (plain, _) = link(&frames, &pos, &LinkParams::new(2.0, 0)).unwrap();
    assert_eq!(ids, plain);
    assert_eq!(control.progress(), (30, 30));
    control.cancel();
    let err = link(&frames, &pos, &p).unwrap_err();
    assert_eq!(err.to_string(), "link: cancelled");
}
