#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Host → OpenCL → host round trips (every supported dtype, non-contiguous views, random
//! data, bit-exact), async transfers, sub-regions, device copies, concurrency and bad input.

mod common;

use bridge_core::array::HostData;
use bridge_core::convert::TransferKind;
use bridge_core::{Array, BridgeError, DType, Device, HostElement, MemoryType, with_host_data};
use bridge_opencl::{ClStorage, OpenClBackend};
use ndarray::{ArrayD, Axis, IxDyn, Slice};
use rand::{Rng, SeedableRng, rngs::StdRng};

const DTYPES: [DType; 8] = [
    DType::U8,
    DType::U16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

fn random_host(rng: &mut StdRng, dtype: DType, shape: &[usize]) -> HostData {
    let n: usize = shape.iter().product();
    let mut bytes = vec![0u8; n * dtype.size_of()];
    rng.fill(&mut bytes[..]);
    HostData::from_c_bytes(dtype, shape, &bytes).unwrap()
}

/// Non-contiguous layouts of a C-ordered array: transposed, strided, reversed, permuted.
fn views<T: HostElement + Clone>(a: ArrayD<T>) -> Vec<HostData> {
    let mut out = Vec::new();
    out.push(T::wrap(a.clone().reversed_axes()));
    let mut strided = a.clone();
    strided.slice_axis_inplace(Axis(0), Slice::new(0, None, 2));
    strided.slice_axis_inplace(Axis(1), Slice::new(1, None, 3));
    out.push(T::wrap(strided));
    let mut reversed = a.clone();
    reversed.invert_axis(Axis(2));
    reversed.slice_axis_inplace(Axis(1), Slice::new(0, None, -2));
    out.push(T::wrap(reversed));
    let permuted = a.permuted_axes(IxDyn(&[1, 2, 0]));
    out.push(T::wrap(permuted));
    out
}

fn supported(backend: &OpenClBackend, dev: Device) -> Vec<DType> {
    DTYPES
        .into_iter()
        .filter(|&d| backend.check_dtype(dev, d).is_ok())
        .collect()
}

#[test]
fn every_dtype_round_trips_bit_exact() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let reg = common::registry(&backend);
    let mut rng = StdRng::seed_from_u64(1);
    for dtype in supported(&backend, dev) {
        for shape in [vec![0], vec![1], vec![1000], vec![17, 33], vec![3, 5, 7, 2]] {
            let host = random_host(&mut rng, dtype, &shape);
            let want = host.to_c_bytes().into_owned();
            let on_dev = reg
                .convert(Array::from_host(host), MemoryType::OpenCl, dev)
                .unwrap();
            assert_eq!(on_dev.device(), dev);
            assert_eq!(on_dev.memory_type(), MemoryType::OpenCl);
            assert_eq!(on_dev.dtype(), dtype);
            assert_eq!(on_dev.shape(), &shape[..]);
            let back = reg.convert(on_dev, MemoryType::Host, Device::Cpu).unwrap();
            assert_eq!(back.shape(), &shape[..]);
            assert_eq!(
                back.host().unwrap().to_c_bytes().as_ref(),
                &want[..],
                "{dtype} {shape:?}"
            );
        }
    }
}

#[test]
fn non_contiguous_views_round_trip() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let reg = common::registry(&backend);
    let mut rng = StdRng::seed_from_u64(2);
    for dtype in supported(&backend, dev) {
        let base = random_host(&mut rng, dtype, &[6, 10, 4]);
        let vs = with_host_data!(base, a => views(a));
        for v in vs {
            assert!(!v.is_standard_layout());
            let want = v.to_c_bytes().into_owned();
            let shape = v.shape().to_vec();
            let on_dev = reg
                .convert(Array::from_host(v), MemoryType::OpenCl, dev)
                .unwrap();
            let back = reg.convert(on_dev, MemoryType::Host, Device::Cpu).unwrap();
            assert_eq!(back.shape(), &shape[..]);
            assert!(back.host().unwrap().is_standard_layout());
            assert_eq!(
                back.host().unwrap().to_c_bytes().as_ref(),
                &want[..],
                "{dtype} {shape:?}"
            );
        }
    }
}

#[test]
fn async_transfers_wait_for_completion() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(3);
    let host = random_host(&mut rng, DType::F32, &[257, 129]);
    let want = host.to_c_bytes().into_owned();
    let pending = backend.upload_async(&host, dev).unwrap();
    let on_dev = pending.wait().unwrap();
    let pending = backend.download_async(&on_dev).unwrap();
    let back = pending.wait().unwrap();
    assert_eq!(back.to_c_bytes().as_ref(), &want[..]);

    // Raw buffer level: write_async hands the staging bytes back; read_async yields a vector.
    let buf = backend.alloc(dev, want.len()).unwrap();
    let w = buf.write_async(0, want.clone()).unwrap();
    let staged = w.wait().unwrap();
    assert_eq!(staged, want);
    let r = buf.read_async(0, want.len()).unwrap();
    let _ = r.is_complete().unwrap();
    assert_eq!(r.wait().unwrap(), want);
    // Dropping a token without waiting is safe (it waits).
    drop(buf.read_async(0, 16).unwrap());
}

#[test]
fn sub_regions_share_memory() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let align = backend.alloc(dev, 1).unwrap().sub_region_alignment();
    let buf = backend.alloc(dev, 4 * align).unwrap();
    let data: Vec<u8> = (0..4 * align).map(|i| (i % 251) as u8).collect();
    buf.write(0, &data).unwrap();
    let sub = buf.sub_region(align, 2 * align).unwrap();
    assert_eq!(sub.len(), 2 * align);
    let mut got = vec![0u8; 2 * align];
    sub.read(0, &mut got).unwrap();
    assert_eq!(got, &data[align..3 * align]);
    sub.write(0, &vec![7u8; align]).unwrap();
    let mut all = vec![0u8; 4 * align];
    buf.read(0, &mut all).unwrap();
    assert!(all[align..2 * align].iter().all(|&b| b == 7));
    assert_eq!(&all[..align], &data[..align]);
    // A sub-region outlives the parent handle.
    drop(buf);
    sub.read(0, &mut got).unwrap();
    // Misaligned offsets and out-of-range regions are typed errors.
    if align > 1 {
        let e = sub.sub_region(1, 4).unwrap_err();
        assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
    }
    let e = sub.sub_region(0, 3 * align).unwrap_err();
    assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
    let e = sub.read(align, &mut vec![0u8; align + 1]).unwrap_err();
    assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
}

#[test]
fn fill_and_zeroed() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let z = backend.alloc_zeroed(dev, 4096 + 4).unwrap();
    assert!(z.read_vec::<u8>().unwrap().iter().all(|&b| b == 0));
    z.fill(-7i32).unwrap();
    assert!(z.read_vec::<i32>().unwrap().iter().all(|&v| v == -7));
    z.fill(1.5f64).unwrap_err();
}

#[test]
fn device_copies() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(4);
    let src_bytes: Vec<u8> = (0..100_003).map(|_| rng.random()).collect();
    let a = backend.alloc(dev, src_bytes.len()).unwrap();
    a.write(0, &src_bytes).unwrap();
    let b = backend.alloc(dev, src_bytes.len()).unwrap();
    b.copy_from(&a, 0, 0, src_bytes.len()).unwrap();
    let mut got = vec![0u8; src_bytes.len()];
    b.read(0, &mut got).unwrap();
    assert_eq!(got, src_bytes);
    // Partial copy with offsets.
    b.copy_from(&a, 10, 1000, 500).unwrap();
    b.read(0, &mut got).unwrap();
    assert_eq!(&got[1000..1500], &src_bytes[10..510]);

    // The OpenCL -> OpenCL converter (same device: device copy).
    let conv = bridge_core::backend::Backend::converters(&*backend)
        .into_iter()
        .find(|c| c.source() == MemoryType::OpenCl && c.target() == MemoryType::OpenCl)
        .unwrap();
    let reg = common::registry(&backend);
    assert_eq!(
        conv.edge(dev, dev, reg.topology()),
        Some(TransferKind::DeviceCopy)
    );
    let host = random_host(&mut rng, DType::I32, &[31, 7]);
    let want = host.to_c_bytes().into_owned();
    let arr = backend.upload(&host, dev).unwrap();
    let copied = conv.convert(arr, dev, TransferKind::DeviceCopy).unwrap();
    assert_eq!(copied.bytes_moved, want.len() as u64);
    let back = backend.download(&copied.array).unwrap();
    assert_eq!(back.to_c_bytes().as_ref(), &want[..]);
    assert!(copied.array.storage::<ClStorage>().is_some());
}

#[test]
fn copies_between_contexts_are_staged_through_the_host() {
    let Some((a, dev)) = common::device() else {
        return;
    };
    // A second backend instance has its own context: copies between the two are staged
    // through host memory, in chunks of STAGING_CHUNK bytes (three chunks here).
    let b = bridge_opencl::backend();
    let n = 2 * bridge_opencl::STAGING_CHUNK + 12_345;
    let mut rng = StdRng::seed_from_u64(5);
    let mut data = vec![0u8; n];
    rng.fill(&mut data[..]);
    let src = a.alloc(dev, n).unwrap();
    src.write(0, &data).unwrap();
    let dst = b.alloc(dev, n + 8).unwrap();
    assert!(!dst.same_context(&src));
    dst.copy_from(&src, 0, 8, n).unwrap();
    let mut got = vec![0u8; n];
    dst.read(8, &mut got).unwrap();
    assert!(got == data, "staged copy differs");
}

#[test]
fn eight_threads_convert_at_once() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let reg = common::registry(&backend);
    let dtypes = supported(&backend, dev);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let reg = &reg;
            let dtypes = &dtypes;
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(100 + t);
                for i in 0..20 {
                    let dtype = dtypes[(t as usize + i) % dtypes.len()];
                    let shape = [
                        1 + rng.random_range(0..300usize),
                        1 + rng.random_range(0..50usize),
                    ];
                    let host = random_host(&mut rng, dtype, &shape);
                    let want = host.to_c_bytes().into_owned();
                    let on_dev = reg
                        .convert(Array::from_host(host), MemoryType::OpenCl, dev)
                        .unwrap();
                    let back = reg.convert(on_dev, MemoryType::Host, Device::Cpu).unwrap();
                    assert_eq!(
                        back.host().unwrap().to_c_bytes().as_ref(),
                        &want[..],
                        "thread {t} item {i}"
                    );
                }
            });
        }
    });
    let stats = backend.pool_stats(dev).unwrap();
    assert_eq!(stats.in_use, 0);
}

#[test]
fn bad_input_is_typed() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    // Byte length that does not match the shape.
    let buf = backend.alloc(dev, 15).unwrap();
    let e = backend
        .wrap_buffer(buf.clone(), DType::F32, &[2, 2])
        .unwrap_err();
    assert!(matches!(e, BridgeError::ShapeMismatch { .. }), "{e}");
    let e = HostData::from_c_bytes(DType::F32, &[2, 2], &[0u8; 15]).unwrap_err();
    assert!(matches!(e, BridgeError::ShapeMismatch { .. }), "{e}");
    let e = buf.read_vec::<f32>().unwrap_err();
    assert!(matches!(e, BridgeError::ShapeMismatch { .. }), "{e}");
    // Storage too small for the claimed shape.
    let e = Array::from_storage(Box::new(ClStorage::new(buf)), vec![4, 4], DType::F32).unwrap_err();
    assert!(matches!(e, BridgeError::ShapeMismatch { .. }), "{e}");
    // Host-only accessors on a device array say where it lives.
    let arr = backend.alloc_array(dev, DType::U8, &[3]).unwrap();
    assert!(matches!(
        arr.host().unwrap_err(),
        BridgeError::Unsupported(_)
    ));
    // Not an OpenCL array.
    let h = Array::from_ndarray(ArrayD::<u8>::zeros(vec![2]));
    assert!(matches!(
        OpenClBackend::buffer(&h).unwrap_err(),
        BridgeError::Unsupported(_)
    ));
    // Overflowing shapes.
    let e = backend
        .alloc_array(dev, DType::F64, &[usize::MAX, 2])
        .unwrap_err();
    assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
}
