#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dlpark::metadata::Dynamic;
use ndarray::{ArrayD, IxDyn, s};

use super::*;
use crate::convert::{ConversionObserver, ConversionRecord, Registry};

/// Counts drops: the owner whose release proves the deleter ran (once).
struct Counted(Arc<AtomicUsize>, Vec<f32>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A tensor from a "foreign" producer: raw parts kept alive by a counted owner.
fn foreign(
    values: Vec<f32>,
    shape: &[usize],
    abi: Abi,
    read_only: bool,
) -> (DlpackTensor, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let owner = Counted(Arc::clone(&drops), values);
    let raw = RawParts {
        data: owner.1.as_ptr() as *mut c_void,
        shape: shape.to_vec(),
        strides: c_strides(shape),
        dtype: DType::F32,
        device: dl_device(Device::Cpu),
    };
    let opts = ExportOptions {
        abi,
        read_only,
        ..Default::default()
    };
    // SAFETY: the Vec's buffer lives as long as the owner.
    let t = unsafe { export_raw(Box::new(owner), raw, &opts, false) }.unwrap();
    (t, drops)
}

fn host_of(dtype: DType, shape: &[usize]) -> HostData {
    let n: usize = shape.iter().product::<usize>() * dtype.size_of();
    let bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 251) as u8).collect();
    let h = HostData::from_c_bytes(dtype, shape, &bytes).unwrap();
    // No NaN surprises in equality: compare bytes.
    h
}

#[test]
fn every_dtype_round_trips_zero_copy() {
    for dtype in DType::ALL {
        for abi in [Abi::Versioned, Abi::Legacy] {
            let h = host_of(dtype, &[3, 5]);
            let a = Array::from_host(h.clone());
            let ptr = crate::with_host_data!(a.host().unwrap(), x => x.as_ptr() as usize);
            let opts = ExportOptions {
                abi,
                ..Default::default()
            };
            let out = export_host(a, &opts).unwrap();
            assert!(!out.copied);
            let info = out.tensor.info().clone();
            assert_eq!((info.dtype, info.abi, info.data), (dtype, abi, ptr));
            assert_eq!(info.shape, [3, 5]);
            assert_eq!(info.strides, [5, 1]);
            assert_eq!(
                out.tensor.to_host_data().unwrap().to_c_bytes(),
                h.to_c_bytes()
            );
            let (back, copied) = out.tensor.into_array().unwrap();
            assert!(!copied, "{dtype} {abi:?}: ours comes back zero-copy");
            let back_ptr = crate::with_host_data!(back.host().unwrap(), x => x.as_ptr() as usize);
            assert_eq!(back_ptr, ptr);
        }
    }
}

#[test]
fn strided_views_export_zero_copy_with_their_strides() {
    let base = ArrayD::<f64>::from_shape_fn(IxDyn(&[4, 6]), |i| (i[0] * 6 + i[1]) as f64);
    let t = base.clone().reversed_axes(); // transposed: strides [1, 6]
    let sliced = base.slice(s![.., ..;2]).to_owned(); // owned: contiguous
    for (a, strides) in [(t, vec![1isize, 6]), (sliced.into_dyn(), vec![3, 1])] {
        let expect = a.clone();
        let ptr = a.as_ptr() as usize;
        let out = export_host(Array::from_ndarray(a), &ExportOptions::default()).unwrap();
        assert!(!out.copied);
        assert_eq!(out.tensor.info().data, ptr);
        assert_eq!(out.tensor.info().strides, strides);
        assert_eq!(out.tensor.view::<f64>().unwrap(), expect.view());
    }
}

#[test]
fn negative_strides_are_copied_and_flagged() {
    let a = ArrayD::<u16>::from_shape_fn(IxDyn(&[3, 4]), |i| (i[0] * 4 + i[1]) as u16);
    let mut flipped = a.clone();
    flipped.invert_axis(ndarray::Axis(1));
    let expect = flipped.clone();
    let out = export_host(Array::from_ndarray(flipped), &ExportOptions::default()).unwrap();
    assert!(out.copied);
    assert_eq!(out.kind(), TransferKind::HostCopy);
    assert!(out.tensor.info().is_copied);
    assert_eq!(out.tensor.info().strides, [4, 1]);
    assert_eq!(out.tensor.view::<u16>().unwrap(), expect.view());
}

#[test]
fn foreign_negative_strides_are_viewed_in_place() {
    let (t, _) = foreign(
        (0..6).map(|v| v as f32).collect(),
        &[6],
        Abi::Versioned,
        false,
    );
    let t = Arc::new(t);
    // A reversed view of the same memory: element 0 is the last one, stride -1.
    let raw = RawParts {
        data: (t.info().data + 5 * 4) as *mut c_void,
        shape: vec![6],
        strides: vec![-1],
        dtype: DType::F32,
        device: dl_device(Device::Cpu),
    };
    // SAFETY: the parts address the six floats `t` keeps alive.
    let rev = unsafe {
        export_raw(
            Box::new(Arc::clone(&t)),
            raw,
            &ExportOptions::default(),
            false,
        )
    }
    .unwrap();
    let v = rev.view::<f32>().unwrap();
    assert_eq!(
        v.iter().copied().collect::<Vec<_>>(),
        [5., 4., 3., 2., 1., 0.]
    );
}

#[test]
fn read_only_is_honoured() {
    let (mut t, _) = foreign(vec![1.0; 4], &[2, 2], Abi::Versioned, true);
    assert!(t.info().read_only);
    assert!(t.view::<f32>().is_ok());
    assert!(matches!(
        t.view_mut::<f32>(),
        Err(BridgeError::InvalidInput(_))
    ));
    // Re-exports stay read-only, and the legacy ABI cannot carry the flag.
    let t = Arc::new(t);
    assert!(
        t.reexport(&ExportOptions::default())
            .unwrap()
            .info()
            .read_only
    );
    let legacy = ExportOptions {
        abi: Abi::Legacy,
        ..Default::default()
    };
    assert!(matches!(
        t.reexport(&legacy),
        Err(BridgeError::Unsupported(_))
    ));
    let ro_legacy = ExportOptions {
        abi: Abi::Legacy,
        read_only: true,
        ..Default::default()
    };
    let a = Array::from_ndarray(ArrayD::<u8>::zeros(IxDyn(&[2])));
    assert!(matches!(
        export_host(a, &ro_legacy),
        Err(BridgeError::Unsupported(_))
    ));
}

#[test]
fn writes_through_a_mutable_view_reach_the_producer() {
    let (mut t, _) = foreign(vec![0.0; 6], &[2, 3], Abi::Legacy, false);
    let ptr = t.info().data as *const f32;
    t.view_mut::<f32>().unwrap()[[1, 2]] = 7.5;
    // SAFETY: the producer's buffer is alive (t holds it) and has 6 floats.
    assert_eq!(unsafe { *ptr.add(5) }, 7.5);
}

#[test]
fn overlapping_tensors_are_not_writable() {
    let (t, _) = foreign(vec![0.0; 3], &[3], Abi::Versioned, false);
    let t = Arc::new(t);
    let raw = RawParts {
        data: t.info().data as *mut c_void,
        shape: vec![4, 3],
        strides: vec![0, 1], // broadcast rows
        dtype: DType::F32,
        device: dl_device(Device::Cpu),
    };
    // SAFETY: every addressed element is one of the three floats `t` keeps alive.
    let mut b = unsafe { export_raw(Box::new(t), raw, &ExportOptions::default(), false) }.unwrap();
    assert_eq!(b.view::<f32>().unwrap().shape(), &[4, 3]);
    assert!(matches!(
        b.view_mut::<f32>(),
        Err(BridgeError::InvalidInput(_))
    ));
}

#[test]
fn the_deleter_runs_exactly_once() {
    let (t, drops) = foreign(vec![1.0; 8], &[8], Abi::Versioned, false);
    // Ownership handed on as a raw pointer (what a capsule carries) and taken back once.
    let raw = t.into_versioned().unwrap().into_raw();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    // SAFETY: `raw` is the managed tensor just released by `into_raw`, owned by us.
    let t = unsafe { DlpackTensor::from_raw_versioned(raw) }.unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(t);
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    let (t, drops) = foreign(vec![1.0; 8], &[8], Abi::Legacy, false);
    let raw = t.into_legacy().unwrap().into_raw();
    // SAFETY: as above, legacy ABI.
    drop(unsafe { DlpackTensor::from_raw_legacy(raw) }.unwrap());
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn reexports_keep_the_producer_alive_until_the_last_deleter() {
    let (t, drops) = foreign(vec![2.0; 4], &[4], Abi::Versioned, false);
    let t = Arc::new(t);
    let a = t.reexport(&ExportOptions::default()).unwrap();
    let legacy = ExportOptions {
        abi: Abi::Legacy,
        ..Default::default()
    };
    let b = t.reexport(&legacy).unwrap();
    assert_eq!(a.info().data, t.info().data);
    assert_eq!(b.info().data, t.info().data);
    drop(t);
    drop(a);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "b still holds the producer"
    );
    assert_eq!(b.view::<f32>().unwrap().sum(), 8.0);
    drop(b);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[derive(Default)]
struct Records(Mutex<Vec<ConversionRecord>>);
impl ConversionObserver for Records {
    fn on_conversion(&self, record: &ConversionRecord) {
        self.0.lock().unwrap().push(record.clone());
    }
}

#[test]
fn registry_route_reports_zero_copy_and_copies() {
    let reg = Registry::new();
    let records = Arc::new(Records::default());
    reg.set_observer(Some(records.clone()));

    // Ours: zero-copy both ways.
    let a = ArrayD::<f32>::from_shape_fn(IxDyn(&[2, 2]), |i| i[0] as f32);
    let ptr = a.as_ptr() as usize;
    let out = reg
        .to_dlpack(Array::from_ndarray(a), &ExportOptions::default())
        .unwrap();
    let plan = reg
        .plan_from_dlpack(&out.tensor, MemoryType::Host, Device::Cpu)
        .unwrap();
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(plan.kind(), TransferKind::ZeroCopy);
    let back = reg
        .from_dlpack(out.tensor, MemoryType::Host, Device::Cpu)
        .unwrap();
    assert_eq!(
        back.array.as_ndarray::<f32>().unwrap().as_ptr() as usize,
        ptr
    );

    // Foreign host memory: copied into an ndarray, reported.
    let (t, drops) = foreign(vec![3.0; 6], &[2, 3], Abi::Legacy, false);
    let imported = reg.from_dlpack(t, MemoryType::Host, Device::Cpu).unwrap();
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the producer's tensor is released"
    );
    assert_eq!(imported.route.kind(), TransferKind::HostCopy);
    assert_eq!(imported.array.as_ndarray::<f32>().unwrap().sum(), 18.0);

    let recs = records.0.lock().unwrap();
    let kinds: Vec<(TransferKind, u64)> = recs
        .iter()
        .map(|r| (r.route.kind(), r.bytes_moved))
        .collect();
    assert_eq!(
        kinds,
        [
            (TransferKind::ZeroCopy, 0),
            (TransferKind::ZeroCopy, 0),
            (TransferKind::HostCopy, 24)
        ]
    );
}

#[test]
fn deleters_after_the_registry_is_gone() {
    let (t, drops) = {
        let reg = Registry::new();
        let (t, drops) = foreign(vec![1.0; 3], &[3], Abi::Versioned, false);
        let t = Arc::new(t);
        let out = reg
            .to_dlpack(
                Array::from_ndarray(ArrayD::<f32>::ones(IxDyn(&[5]))),
                &ExportOptions::default(),
            )
            .unwrap();
        drop(reg);
        let again = t.reexport(&ExportOptions::default()).unwrap();
        drop(t);
        assert_eq!(out.tensor.view::<f32>().unwrap().sum(), 5.0);
        drop(out);
        (again, drops)
    };
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(t.view::<f32>().unwrap().sum(), 3.0);
    // The deleter runs on another thread, after everything else is gone.
    std::thread::spawn(move || drop(t)).join().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn typed_errors() {
    let reg = Registry::new();
    // A consumer stream for host memory.
    let opts = ExportOptions {
        stream: ConsumerStream::Handle(1234),
        ..Default::default()
    };
    let a = Array::from_ndarray(ArrayD::<f32>::zeros(IxDyn(&[2])));
    assert!(matches!(
        reg.to_dlpack(a, &opts),
        Err(BridgeError::InvalidArgument { .. })
    ));
    assert!(ConsumerStream::from_protocol(Some(0)).is_err());
    assert!(ConsumerStream::from_protocol(Some(-7)).is_err());
    assert_eq!(
        ConsumerStream::from_protocol(Some(-1)).unwrap(),
        ConsumerStream::NoSync
    );
    assert_eq!(ExportOptions::abi_for_max_version(None), Abi::Legacy);
    assert_eq!(
        ExportOptions::abi_for_max_version(Some((1, 3))),
        Abi::Versioned
    );

    // Dtypes outside arraybridge's eight: typed, and the producer's tensor is released.
    let drops = Arc::new(AtomicUsize::new(0));
    let owner = Counted(Arc::clone(&drops), vec![0.0; 2]);
    let data = owner.1.as_ptr() as *mut c_void;
    // SAFETY: shape and strides are copied (nothing borrowed).
    let prepared = unsafe { Dynamic::new(vec![2i64], vec![1i64]).prepare_unchecked() }.unwrap();
    let mut init = prepared.initialize(Box::new(owner));
    init.set_data(data)
        .set_dtype(DLDataType::BOOL)
        .set_device(DLDevice::CPU);
    // SAFETY: two bytes of the owner's buffer, alive until the deleter.
    let m = unsafe { init.finish() };
    assert!(matches!(
        DlpackTensor::from_versioned(m),
        Err(BridgeError::InvalidInput(_))
    ));
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    // A CUDA tensor with no CUDA exchange registered: BackendUnavailable before anything moves.
    let (t, _) = foreign(vec![0.0; 2], &[2], Abi::Versioned, false);
    let t = Arc::new(t);
    let raw = RawParts {
        data: 0x1000 as *mut c_void,
        shape: vec![2],
        strides: vec![1],
        dtype: DType::F32,
        device: dl_device(Device::Cuda(0)),
    };
    // SAFETY: never dereferenced (the import is refused before anything reads it).
    let cuda = unsafe { export_raw(Box::new(t), raw, &ExportOptions::default(), false) }.unwrap();
    assert_eq!(cuda.info().device, Device::Cuda(0));
    assert!(matches!(
        cuda.view::<f32>(),
        Err(BridgeError::Unsupported(_))
    ));
    let mut reg = Registry::new();
    reg.topology_mut().add_device(Device::Cuda(0), None);
    assert!(matches!(
        reg.from_dlpack(cuda, MemoryType::Host, Device::Cpu),
        Err(BridgeError::BackendUnavailable { .. })
    ));
}

#[test]
fn device_and_dtype_maps() {
    for d in DType::ALL {
        assert_eq!(dtype_of(dl_dtype(d)).unwrap(), d);
    }
    for d in [Device::Cpu, Device::Cuda(3), Device::OpenCl(1)] {
        assert_eq!(device_of(dl_device(d)).unwrap(), d);
    }
    assert_eq!(
        device_of(dl_device(Device::TorchCuda(2))).unwrap(),
        Device::Cuda(2)
    );
    let metal = DLDevice::metal(0);
    assert!(matches!(device_of(metal), Err(BridgeError::Unsupported(_))));
}

#[test]
fn empty_and_scalar_tensors() {
    for shape in [vec![0usize, 3], vec![]] {
        let a = ArrayD::<i64>::zeros(IxDyn(&shape));
        let out = export_host(Array::from_ndarray(a), &ExportOptions::default()).unwrap();
        assert_eq!(out.tensor.info().shape, shape);
        assert_eq!(out.tensor.view::<i64>().unwrap().shape(), &shape[..]);
        let (back, _) = out.tensor.into_array().unwrap();
        assert_eq!(back.shape(), &shape[..]);
    }
}

/// The `TensorInfo` of host memory read in place (what the Python package's NumPy fast path
/// builds).
fn host_info(data: usize, shape: &[usize], strides: &[isize], read_only: bool) -> TensorInfo {
    TensorInfo {
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        dtype: DType::F32,
        device: Device::Cpu,
        dl_device: (1, 0),
        read_only,
        is_copied: false,
        abi: Abi::Versioned,
        data,
    }
}

#[test]
fn host_memory_read_in_place_without_a_managed_tensor() {
    let drops = Arc::new(AtomicUsize::new(0));
    let owner = Counted(Arc::clone(&drops), (0..6).map(|i| i as f32).collect());
    let data = owner.1.as_ptr() as usize;
    // a (3, 2) view of the transpose: strides (1, 3), the last row first (a negative stride)
    let info = host_info(data + 2 * 4, &[3, 2], &[-1, 3], true);
    // SAFETY: the six floats live in `owner`, which the tensor keeps.
    let t = unsafe { DlpackTensor::from_host_owner(info, Box::new(owner)) }.unwrap();
    let v = t.view::<f32>().unwrap();
    assert_eq!(
        v,
        ndarray::arr2(&[[2.0, 5.0], [1.0, 4.0], [0.0, 3.0]]).into_dyn()
    );
    assert!(t.info().read_only);
    // re-exported zero-copy (read-only stays read-only), never taken back as an owned array
    let t = Arc::new(t);
    let e = t.reexport(&ExportOptions::default()).unwrap();
    assert_eq!(e.info().data, data + 8);
    assert!(e.info().read_only);
    drop(t);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "the export holds the owner"
    );
    let (copy, copied) = e.into_array().unwrap();
    assert!(copied);
    assert_eq!(copy.shape(), &[3, 2]);
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    // a foreign tensor of this kind is neither ABI, and is copied into an owned array
    let v = [1.0f32; 4];
    // SAFETY: `v` outlives the tensor (dropped at the end of the test).
    let t = unsafe {
        DlpackTensor::from_host_owner(
            host_info(v.as_ptr() as usize, &[4], &[1], false),
            Box::new(()),
        )
    }
    .unwrap();
    let Err(t) = t.into_versioned() else {
        panic!("not a versioned managed tensor")
    };
    let Err(t) = t.into_legacy() else {
        panic!("not a legacy managed tensor")
    };
    let (a, copied) = t.into_array().unwrap();
    assert!(copied && a.shape() == [4]);
}

#[test]
fn host_memory_read_in_place_is_checked() {
    let bad = [
        host_info(0, &[2], &[1], false), // null data for a non-empty tensor
        host_info(64, &[2, 3], &[3], false),
        host_info(64, &[usize::MAX, 3], &[3, 1], false),
        TensorInfo {
            device: Device::Cuda(0),
            ..host_info(64, &[2], &[1], false)
        },
    ];
    for info in bad {
        // SAFETY: refused before any element is read.
        let e = unsafe { DlpackTensor::from_host_owner(info, Box::new(())) }.unwrap_err();
        assert!(
            matches!(
                e,
                BridgeError::InvalidInput(_) | BridgeError::InvalidArgument { .. }
            ),
            "{e}"
        );
    }
    // an empty tensor may have a null data pointer
    // SAFETY: no element to read.
    let t = unsafe {
        DlpackTensor::from_host_owner(host_info(0, &[0, 3], &[3, 1], false), Box::new(()))
    };
    assert_eq!(t.unwrap().view::<f32>().unwrap().len(), 0);
}
