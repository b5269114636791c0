//! `paco_array`: PACO on inputs of any memory type, run where the cube lives, gives the maps of
//! `paco` on the same data, reading host and `torch:cpu` `f64` inputs in place and converting
//! anything else once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod paco_common;

use std::sync::{Arc, Mutex};

use algorithms::paco::{PacoParams, PsfNorm, paco, paco_array};
use bridge_core::Array;
use bridge_core::convert::{ConversionObserver, ConversionRecord, Registry};
use paco_common::same;

#[derive(Default)]
struct Records(Mutex<Vec<ConversionRecord>>);

impl ConversionObserver for Records {
    fn on_conversion(&self, record: &ConversionRecord) {
        self.0.lock().unwrap().push(record.clone());
    }
}

fn params() -> PacoParams {
    PacoParams {
        psf_norm: PsfNorm::Factor(9.54),
        ..Default::default()
    }
}

#[test]
fn host_inputs_are_read_in_place() {
    let (cube, angles, psf) = algorithms::paco::bench::synthetic_adi(12, 32, 5);
    let want = paco(cube.view(), angles.view(), psf.view(), &params()).unwrap();
    let rec = Arc::new(Records::default());
    let reg = Registry::new();
    reg.set_observer(Some(rec.clone()));
    let (maps, back) = paco_array(
        &reg,
        Array::from_ndarray(cube.clone().into_dyn()),
        Array::from_ndarray(angles.clone().into_dyn()),
        Array::from_ndarray(psf.clone().into_dyn()),
        &params(),
    )
    .unwrap();
    assert!(same(&maps.snr, &want.snr) && same(&maps.a, &want.a));
    assert!(
        rec.0.lock().unwrap().is_empty(),
        "host f64 inputs need no conversion"
    );
    assert_eq!(back[0].shape(), &[12, 32, 32]);
    // (T, 1) angles are accepted; a 1-D cube is a typed error.
    let (maps, _) = paco_array(
        &reg,
        Array::from_ndarray(cube.clone().into_dyn()),
        Array::from_ndarray(angles.clone().insert_axis(ndarray::Axis(1)).into_dyn()),
        Array::from_ndarray(psf.clone().into_dyn()),
        &params(),
    )
    .unwrap();
    assert!(same(&maps.snr, &want.snr));
    let e = paco_array(
        &reg,
        Array::from_ndarray(ndarray::ArrayD::<f64>::zeros(vec![5])),
        Array::from_ndarray(angles.clone().into_dyn()),
        Array::from_ndarray(psf.clone().into_dyn()),
        &params(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("PACO cube"), "{e}");
}

#[cfg(feature = "opencl")]
#[test]
fn a_device_cube_is_downloaded_once_and_runs_on_its_device() {
    let cl = bridge_opencl::backend();
    if bridge_core::backend::Backend::devices(cl.as_ref()).map_or(true, |d| d.is_empty()) {
        assert!(
            !test_support::env_flag("ARRAYBRIDGE_REQUIRE_OPENCL"),
            "no OpenCL device"
        );
        return;
    }
    let (cube, angles, psf) = algorithms::paco::bench::synthetic_adi(12, 32, 6);
    let want = paco(cube.view(), angles.view(), psf.view(), &params()).unwrap();
    let rec = Arc::new(Records::default());
    let mut reg = Registry::new();
    reg.register_backend(cl.clone());
    reg.set_observer(Some(rec.clone()));
    let dev = bridge_core::Device::OpenCl(0);
    let on_dev = reg
        .convert(
            Array::from_ndarray(cube.clone().into_dyn()),
            bridge_core::MemoryType::OpenCl,
            dev,
        )
        .unwrap();
    rec.0.lock().unwrap().clear();
    let (uploads, _) = cl.executor_uploads(dev);
    let (maps, back) = paco_array(
        &reg,
        on_dev,
        Array::from_ndarray(angles.into_dyn()),
        Array::from_ndarray(psf.into_dyn()),
        &params(),
    )
    .unwrap();
    assert!(same(&maps.snr, &want.snr));
    let r = rec.0.lock().unwrap().clone();
    assert_eq!(r.len(), 1, "one conversion: {r:?}");
    assert_eq!(r[0].bytes_moved, (12 * 32 * 32 * 8) as u64);
    assert_eq!(back[0].memory_type(), bridge_core::MemoryType::Host);
    // the run was on the cube's device: its executor uploaded the cube (and the pixel inputs)
    assert!(cl.executor_uploads(dev).0 > uploads, "PACO ran on {dev}");
}

#[cfg(feature = "torch")]
#[test]
fn a_torch_cpu_cube_is_read_without_a_copy() {
    let (cube, angles, psf) = algorithms::paco::bench::synthetic_adi(12, 32, 7);
    let want = paco(cube.view(), angles.view(), psf.view(), &params()).unwrap();
    let rec = Arc::new(Records::default());
    let mut reg = Registry::new();
    reg.register_backend(bridge_torch::backend());
    reg.set_observer(Some(rec.clone()));
    let flat: Vec<f64> = cube.iter().copied().collect();
    let tensor = bridge_torch::tch::Tensor::from_slice(&flat).reshape([12, 32, 32]);
    let ptr = tensor.data_ptr() as usize;
    let (maps, back) = paco_array(
        &reg,
        bridge_torch::array_from_tensor(tensor).unwrap(),
        Array::from_ndarray(angles.into_dyn()),
        Array::from_ndarray(psf.into_dyn()),
        &params(),
    )
    .unwrap();
    assert!(same(&maps.snr, &want.snr));
    assert!(
        rec.0.lock().unwrap().is_empty(),
        "no conversion for a torch:cpu tensor"
    );
    assert_eq!(
        bridge_torch::tensor_of(&back[0]).unwrap().data_ptr() as usize,
        ptr
    );
}
