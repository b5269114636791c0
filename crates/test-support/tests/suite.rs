//! `device_suite!` over a registry with a fake OpenCL device and no CUDA backend: `cpu` and
//! `opencl` run the body; `cuda` skips (or fails under `ARRAYBRIDGE_REQUIRE_GPU=1`, as it must).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bridge_core::convert::Registry;
use bridge_core::{Array, Device, MemoryType};
use test_support::fake::{FakeBackend, new_log};

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register_backend(FakeBackend::new(
        MemoryType::OpenCl,
        &[(Device::OpenCl(0), None)],
        1 << 20,
        new_log(),
    ));
    reg
}

test_support::device_suite!(round_trip, registry = registry(), |reg, device| {
    let a = Array::from_ndarray(ndarray::ArrayD::<f32>::from_elem(vec![3], 1.5));
    let on = reg
        .convert(a, device.memory_type(), device)
        .expect("to the device");
    assert_eq!(on.device(), device);
    let back = reg.convert(on, MemoryType::Host, Device::Cpu).unwrap();
    assert_eq!(
        back.into_ndarray::<f32>().unwrap().as_slice(),
        Some(&[1.5f32; 3][..])
    );
});

#[test]
fn fixtures_are_bridge_cores() {
    assert_eq!(test_support::fixtures::dir(), test_support::fixtures::dir());
    assert!(test_support::fixtures::path("detect/README.md").is_file());
}

#[test]
fn npy_reads_a_fixture() {
    let n = test_support::npy::read(&test_support::fixtures::path(
        "detect/blob_log/hisnr_f32.npy",
    ));
    assert_eq!(n.descr, "<f4");
    assert_eq!(n.f32s().len(), n.shape.iter().product::<usize>());
}
