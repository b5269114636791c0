//! Live device handles and algorithms that run where their array lives:
//! `arraybridge::device`, `ArrayTo::to`, `algorithms::detect::{blob_log, locate}`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use arraybridge::algorithms::detect::{
    self, BlobLogParams, LocateParams, Prescale, blob_log_array, locate_array,
};
use arraybridge::{Array, ArrayTo, BridgeError, DType, Device, MemoryType, registry};
use ndarray::Array3;

/// A real-like movie: Gaussian spots that move, on a noisy background (seeded).
fn movie() -> Array3<u16> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 200) as f64
    };
    let spots = [
        (12.0, 15.0, 6000.0),
        (40.0, 22.0, 9000.0),
        (30.0, 50.0, 4000.0),
    ];
    Array3::from_shape_fn((5, 64, 72), |(t, y, x)| {
        let mut v = 800.0 + noise();
        for (k, (sy, sx, a)) in spots.iter().enumerate() {
            let (cy, cx) = (sy + 0.7 * t as f64, sx - 0.4 * (k + t) as f64);
            let d2 = (y as f64 - cy).powi(2) + (x as f64 - cx).powi(2);
            v += a * (-d2 / 6.0).exp();
        }
        v as u16
    })
}

fn blob_params() -> BlobLogParams {
    BlobLogParams {
        max_sigma: 4.0,
        num_sigma: 6,
        threshold: None,
        threshold_rel: Some(0.2),
        ..Default::default()
    }
}

fn present(device: Device) -> bool {
    test_support::device_or_skip(registry(), device).is_some()
}

#[test]
fn opening_devices_gives_typed_errors() {
    let cpu = arraybridge::device("cpu").unwrap();
    assert_eq!(cpu.device(), Device::Cpu);
    assert!(cpu.executor().is_none());
    assert!(arraybridge::device("gpu7").is_err());
    let err = arraybridge::device("opencl:99").unwrap_err();
    assert!(
        matches!(
            err,
            BridgeError::UnknownDevice { .. } | BridgeError::BackendUnavailable { .. }
        ),
        "{err:?}"
    );
    if !registry().topology().has_device(Device::Cuda(0)) {
        let err = arraybridge::device("cuda:0").unwrap_err();
        assert!(
            matches!(
                err,
                BridgeError::UnknownDevice { .. } | BridgeError::BackendUnavailable { .. }
            ),
            "{err:?}"
        );
    }
}

/// `blob_log` and `locate` on an array on `device` give what `blob_log_array` and
/// `locate_array` give there, and the movie stays where it is.
fn same_as_array_functions(device: Device) {
    if !present(device) {
        return;
    }
    let dev = arraybridge::open_device(device).unwrap();
    let host = Array::from_ndarray(movie().into_dyn());
    let moved = Array::from_ndarray(movie().into_dyn()).to(&dev).unwrap();
    assert_eq!(moved.device(), device);
    let p = blob_params();
    let (want, _) = blob_log_array(registry(), host, &p, &dev).unwrap();
    let got = detect::blob_log(&moved, &p).unwrap();
    assert_eq!(got, want);
    assert!(got.iter().all(|f| !f.is_empty()), "{got:?}");
    let lp = LocateParams::new(7);
    let host = Array::from_ndarray(movie().into_dyn());
    let (want, _) = locate_array(registry(), host, &lp, &dev).unwrap();
    let got = detect::locate(&moved, &lp).unwrap();
    assert_eq!(got, want);
    assert!(got.iter().all(|f| !f.is_empty()));
    assert_eq!(moved.device(), device, "the movie has not moved");
}

#[test]
fn cpu_runs_where_the_array_lives() {
    same_as_array_functions(Device::Cpu);
}

#[test]
fn opencl_runs_where_the_array_lives() {
    same_as_array_functions(Device::OpenCl(0));
}

#[test]
fn cuda_runs_where_the_array_lives() {
    same_as_array_functions(Device::Cuda(0));
    // handles, conversions, blob_log and locate on cuda:0 share the device's one executor
    #[cfg(feature = "cuda")]
    if registry().topology().has_device(Device::Cuda(0)) {
        let gpu = arraybridge::bridge_cuda::gpu(0).unwrap();
        assert_eq!(gpu.executors_created(), 1);
    }
}

#[test]
fn a_movie_the_device_cannot_read_in_place_is_an_error_not_a_copy() {
    if !present(Device::OpenCl(0)) {
        return;
    }
    let dev = arraybridge::device("opencl:0").unwrap();
    // minmax needs each frame's extrema on the host
    let movie = Array::from_ndarray(movie().into_dyn()).to(&dev).unwrap();
    let p = BlobLogParams {
        prescale: Prescale::MinMax,
        ..blob_params()
    };
    let err = detect::blob_log(&movie, &p).unwrap_err();
    assert!(matches!(err, BridgeError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("minmax"), "{err}");
    // float pixels are not read in place by the LoG pipeline
    let f = Array::from_ndarray(movie_f32().into_dyn())
        .to(&dev)
        .unwrap();
    assert_eq!(f.dtype(), DType::F32);
    let err = detect::blob_log(&f, &blob_params()).unwrap_err();
    assert!(err.to_string().contains("convert it to the host"), "{err}");
    // and after the conversion the error names, it runs (on the CPU)
    let host = registry()
        .convert(f, MemoryType::Host, Device::Cpu)
        .unwrap();
    assert_eq!(detect::blob_log(&host, &blob_params()).unwrap().len(), 5);
}

fn movie_f32() -> Array3<f32> {
    movie().mapv(|v| f32::from(v) / 65535.0)
}

#[test]
fn handles_of_one_device_share_its_executor() {
    if !present(Device::OpenCl(0)) {
        return;
    }
    let a = arraybridge::device("opencl:0").unwrap();
    let b = arraybridge::device(" opencl:0 ").unwrap();
    assert_eq!(a, b);
    let cl = arraybridge::registry()
        .backend_of::<arraybridge::bridge_opencl::OpenClBackend>()
        .expect("the registry holds the OpenCL back end");
    assert_eq!(cl.executors_created(Device::OpenCl(0)), 1);
}

/// An array carries its device: detection on a movie uploaded through a backend instance of
/// the test's own (not the process's) runs on that instance's executor, and nothing looks the
/// device up by name.
#[cfg(feature = "opencl")]
#[test]
fn an_array_runs_on_the_backend_instance_that_holds_it() {
    use arraybridge::bridge_opencl::OpenClBackend;
    if !present(Device::OpenCl(0)) {
        return;
    }
    let own = OpenClBackend::new();
    let host = Array::from_ndarray(movie().into_dyn());
    let on = own.upload(host.host().unwrap(), Device::OpenCl(0)).unwrap();
    assert_eq!(own.executors_created(Device::OpenCl(0)), 0);
    let p = blob_params();
    let got = detect::blob_log(&on, &p).unwrap();
    // the same as the process's opencl:0 (the same device and kernels, another instance)
    let shared = arraybridge::device("opencl:0").unwrap();
    let (want, _) = blob_log_array(registry(), host, &p, &shared).unwrap();
    assert_eq!(got, want);
    assert_eq!(own.executors_created(Device::OpenCl(0)), 1);
    let handle = arraybridge::algorithms::exec::DeviceHandle::of_array(&on).unwrap();
    assert_eq!(handle.device(), Device::OpenCl(0));
    assert!(handle.executor().is_some());
    // a handle keeps the instance alive; once the instance and its handles are gone, its
    // arrays say so (typed, no panic, no other device)
    drop(own);
    assert_eq!(detect::blob_log(&on, &p).unwrap(), want);
    drop(handle);
    let err = detect::blob_log(&on, &p).unwrap_err();
    assert!(
        matches!(err, BridgeError::BackendUnavailable { .. }),
        "{err:?}"
    );
}

#[test]
fn bad_movies_are_typed_errors() {
    let empty = Array::from_ndarray(ndarray::ArrayD::<u16>::zeros(vec![0, 8, 8]));
    assert!(detect::blob_log(&empty, &blob_params()).is_err());
    let cube = Array::from_ndarray(ndarray::ArrayD::<u16>::zeros(vec![2, 2, 8, 8]));
    assert!(detect::locate(&cube, &LocateParams::new(7)).is_err());
    let ints = Array::from_ndarray(ndarray::ArrayD::<i32>::zeros(vec![2, 8, 8]));
    assert!(detect::blob_log(&ints, &blob_params()).is_err());
}

/// A registry owns its backends: a second registry's `opencl:0` is a device of its own OpenCL
/// backend instance (its executor counted there, not in the process registry's), and an array
/// uploaded through it runs where it lives, with that instance's executor.
#[cfg(feature = "opencl")]
#[test]
fn a_registry_of_its_own_owns_its_devices() {
    use arraybridge::Devices;
    use arraybridge::algorithms::detect::{self, BlobLogParams};
    use std::sync::Arc;
    let Some(dev) = test_support::device_or_skip(arraybridge::registry(), Device::OpenCl(0)) else {
        return;
    };
    let reg = arraybridge::build_registry();
    let mine = reg
        .backend_of::<arraybridge::bridge_opencl::OpenClBackend>()
        .unwrap();
    let process = arraybridge::registry()
        .backend_of::<arraybridge::bridge_opencl::OpenClBackend>()
        .unwrap();
    assert!(
        !Arc::ptr_eq(&mine, &process),
        "two registries, two back ends"
    );
    // the process registry's executor for `dev` is made once (other tests of this binary may
    // make it at any time while this one runs): make it now, so its count cannot move below
    arraybridge::open_device(dev).unwrap();
    let before = process.executors_created(dev);
    assert_eq!(before, 1, "one executor per device per registry");
    let h = reg.open_device(dev).unwrap();
    assert_eq!(h.device(), dev);
    assert_eq!(mine.executors_created(dev), 1);
    assert_eq!(
        process.executors_created(dev),
        before,
        "the process registry was not asked"
    );
    let m = ndarray::Array3::<u16>::from_shape_fn((3, 48, 48), |(t, y, x)| {
        let d2 = (y as f64 - 20.0 - t as f64).powi(2) + (x as f64 - 25.0).powi(2);
        (400.0 + 9000.0 * (-d2 / 6.0).exp()) as u16
    });
    let host = detect::blob_log(&Array::from_ndarray(m.clone().into_dyn()), &params()).unwrap();
    let on = reg
        .convert(Array::from_ndarray(m.into_dyn()), MemoryType::OpenCl, dev)
        .unwrap();
    // positions and scales as on the host (the response's last bits are the device's float32)
    let key = |f: &Vec<Vec<detect::Blob>>| -> Vec<Vec<(f64, f64, f64)>> {
        f.iter()
            .map(|b| b.iter().map(|b| (b.y, b.x, b.sigma)).collect())
            .collect()
    };
    assert_eq!(key(&detect::blob_log(&on, &params()).unwrap()), key(&host));
    assert_eq!(
        mine.executors_created(dev),
        1,
        "the array's device is the handle's"
    );
    assert_eq!(process.executors_created(dev), before);
    // `array.to(&h)` converts through the registry `h` was opened on (its observer hears it)
    #[derive(Default)]
    struct Count(std::sync::Mutex<Vec<u64>>);
    impl arraybridge::core::convert::ConversionObserver for Count {
        fn on_conversion(&self, r: &arraybridge::core::convert::ConversionRecord) {
            self.0.lock().unwrap().push(r.bytes_moved);
        }
    }
    let seen = Arc::new(Count::default());
    reg.set_observer(Some(seen.clone()));
    let m2 = ndarray::Array3::<u16>::from_elem((2, 16, 16), 7);
    let moved = Array::from_ndarray(m2.into_dyn()).to(&h).unwrap();
    assert_eq!(moved.device(), dev);
    assert_eq!(*seen.0.lock().unwrap(), vec![2 * 16 * 16 * 2]);
    assert!(h.registry().is_some_and(|r| Arc::ptr_eq(r, &reg)));
    reg.set_observer(None);

    fn params() -> BlobLogParams {
        BlobLogParams {
            max_sigma: 3.0,
            num_sigma: 5,
            threshold: None,
            threshold_rel: Some(0.2),
            ..Default::default()
        }
    }
}

/// `copy_to` leaves the array where it is and gives an equal one on the device (and on the
/// array's own device, a second buffer).
#[test]
fn copy_to_leaves_the_source() {
    let m = movie();
    let host = Array::from_ndarray(m.clone().into_dyn());
    let cpu = arraybridge::device("cpu").unwrap();
    let again = host.copy_to(&cpu).unwrap();
    assert_eq!(again.into_ndarray::<u16>().unwrap(), m.clone().into_dyn());
    if !present(Device::OpenCl(0)) {
        return;
    }
    let dev = arraybridge::device("opencl:0").unwrap();
    let on = host.copy_to(&dev).unwrap();
    let twice = on.copy_to(&dev).unwrap();
    assert_eq!(on.device(), Device::OpenCl(0));
    for a in [on, twice] {
        let back = a.to(&cpu).unwrap();
        assert_eq!(back.into_ndarray::<u16>().unwrap(), m.clone().into_dyn());
    }
    assert_eq!(host.into_ndarray::<u16>().unwrap(), m.into_dyn());
}
