#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Discovery, capabilities, memory statistics and typed errors for bad devices and dtypes.

mod common;

use bridge_core::backend::Backend;
use bridge_core::memory::MemoryInfo;
use bridge_core::{BridgeError, DType, Device, MemoryType};
use bridge_opencl::OpenClBackend;

#[test]
fn construction_has_no_side_effects() {
    // Creating a backend must not touch the driver (no panic even without OpenCL).
    let b = OpenClBackend::new();
    assert!(format!("{b:?}").contains("devices_in_use: 0"));
}

#[test]
fn devices_are_stable_and_described() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let a = backend.devices().unwrap();
    let b = backend.devices().unwrap();
    let c = bridge_opencl::backend().devices().unwrap();
    assert_eq!(a, b);
    assert_eq!(a, c, "ordinals must be stable across instances");
    for (i, d) in a.iter().enumerate() {
        assert_eq!(d.device, Device::OpenCl(i));
        assert!(d.total_memory.unwrap_or(0) > 0);
        assert!(d.free_memory.is_none());
        assert!(d.capabilities.max_alloc.unwrap_or(0) > 0);
        assert!(d.capabilities.compute_units.unwrap_or(0) > 0);
        assert!(d.capabilities.bf16);
        assert!(d.details.iter().any(|(k, _)| k == "platform"));
        eprintln!("{}: {} {:?}", d.device, d.name, d.capabilities);
    }
    let s = backend.memory_stats(dev).unwrap();
    assert_eq!(s.free, None);
    assert_eq!(s.total, a[0].total_memory.unwrap());
    assert_eq!((s.pool_reserved, s.pool_in_use), (0, 0));
}

#[test]
fn unknown_ordinal_and_wrong_device_are_typed() {
    let Some((backend, _)) = common::device() else {
        return;
    };
    let n = backend.device_count();
    let e = backend.alloc(Device::OpenCl(n), 16).unwrap_err();
    assert!(matches!(e, BridgeError::UnknownDevice { .. }), "{e}");
    let e = backend.memory_stats(Device::OpenCl(n + 7)).unwrap_err();
    assert!(matches!(e, BridgeError::UnknownDevice { .. }), "{e}");
    let e = backend.alloc(Device::Cuda(0), 16).unwrap_err();
    assert!(matches!(e, BridgeError::InvalidPlacement { .. }), "{e}");
    // Through the registry the planner rejects it before anything moves.
    let reg = common::registry(&backend);
    let a = bridge_core::Array::from_ndarray(ndarray::ArrayD::<f32>::zeros(vec![3]));
    let e = reg
        .convert(a, MemoryType::OpenCl, Device::OpenCl(n))
        .unwrap_err();
    assert!(matches!(e, BridgeError::UnknownDevice { .. }), "{e}");
}

#[test]
fn unsupported_dtype_is_typed() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let info = backend.device_info(dev).unwrap();
    for (dtype, supported) in [
        (DType::F16, info.capabilities.fp16),
        (DType::F64, info.capabilities.fp64),
    ] {
        let r = backend.alloc_array(dev, dtype, &[4]);
        if supported {
            assert!(r.is_ok());
        } else {
            let e = r.unwrap_err();
            assert!(
                matches!(e, BridgeError::UnsupportedDType { dtype: d, .. } if d == dtype),
                "{e}"
            );
            // The converter reports the same typed error.
            let reg = common::registry(&backend);
            let h =
                bridge_core::HostData::from_c_bytes(dtype, &[2], &vec![0u8; 2 * dtype.size_of()])
                    .unwrap();
            let e = reg
                .convert(bridge_core::Array::from_host(h), MemoryType::OpenCl, dev)
                .unwrap_err();
            assert!(matches!(e, BridgeError::UnsupportedDType { .. }), "{e}");
        }
    }
    // PoCL reports no cl_khr_fp16: the typed error is what CI sees.
    if info
        .details
        .iter()
        .any(|(k, v)| k == "platform" && v.contains("Portable Computing Language"))
    {
        assert!(!info.capabilities.fp16);
    }
}

#[test]
fn registry_sees_the_backend() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let reg = common::registry(&backend);
    assert!(reg.topology().has_device(dev));
    let route = reg
        .plan(MemoryType::Host, Device::Cpu, MemoryType::OpenCl, dev)
        .unwrap();
    assert_eq!(route.steps.len(), 1);
    let back = reg
        .plan(MemoryType::OpenCl, dev, MemoryType::Host, Device::Cpu)
        .unwrap();
    assert_eq!(back.steps.len(), 1);
    assert!(reg.memory_stats(dev).is_ok());
}
