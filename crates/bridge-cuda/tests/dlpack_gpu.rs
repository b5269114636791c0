#![allow(clippy::unwrap_used, clippy::expect_used)]
//! DLPack exchange of CUDA memory (bridge-cuda's `dlpack` module). These tests skip without a
//! CUDA device and FAIL when `ARRAYBRIDGE_REQUIRE_GPU=1` (the GPU harness runs them).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bridge_core::convert::{Registry, TransferKind};
use bridge_core::dlpack::{
    ConsumerStream, DlpackExchange, ExportOptions, RawParts, dl_device, export_raw,
};
use bridge_core::{Array, DType, Device, HostData, MemoryType};
use bridge_cuda::dlpack::{CudaDlpack, ImportStream, export};
use bridge_cuda::{Gpu, gpu, probe, storage_of};
use cudarc::driver::sys::CUstream;
use test_support::require::{GPU as REQUIRE_GPU, skip};

fn gpu_or_skip() -> Option<Arc<Gpu>> {
    if probe::gpu_available() {
        return Some(gpu(0).expect("gpu(0)"));
    }
    let why = match probe::driver() {
        Err(e) => e.to_string(),
        Ok(()) => "no CUDA device".into(),
    };
    skip(Some(REQUIRE_GPU), "a CUDA device", why);
    None
}

fn ramp(n: usize) -> HostData {
    HostData::F32(ndarray::ArrayD::from_shape_fn(vec![n], |i| i[0] as f32))
}

/// Our own export comes back as the same buffer (same device pointer), both ABIs.
#[test]
fn export_and_take_back_zero_copy() {
    let Some(g) = gpu_or_skip() else { return };
    for abi in [
        bridge_core::dlpack::Abi::Versioned,
        bridge_core::dlpack::Abi::Legacy,
    ] {
        let a = g.upload(&ramp(1000)).unwrap();
        let ptr = storage_of(&a).unwrap().device_ptr() as usize;
        let opts = ExportOptions {
            abi,
            ..Default::default()
        };
        let out = export(a, &opts).unwrap();
        assert_eq!(out.tensor.info().data, ptr);
        assert_eq!(out.tensor.info().device, Device::Cuda(0));
        let (back, kind, bytes) = CudaDlpack.import(out.tensor).unwrap();
        assert_eq!((kind, bytes), (TransferKind::ZeroCopy, 0));
        assert_eq!(storage_of(&back).unwrap().device_ptr() as usize, ptr);
        assert!(!storage_of(&back).unwrap().is_foreign());
    }
}

/// A foreign producer's CUDA tensor is wrapped in place; its deleter runs once, when the
/// array is dropped; the data reads back unchanged through the registry.
#[test]
fn foreign_tensor_is_wrapped_in_place() {
    let Some(g) = gpu_or_skip() else { return };
    struct Owner {
        _buffer: Array,
        drops: Arc<AtomicUsize>,
    }
    impl Drop for Owner {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let src = g.upload(&ramp(4096)).unwrap();
    let ptr = storage_of(&src).unwrap().device_ptr();
    let raw = RawParts {
        data: ptr as usize as *mut std::ffi::c_void,
        shape: vec![64, 64],
        strides: vec![64, 1],
        dtype: DType::F32,
        device: dl_device(Device::Cuda(0)),
    };
    let owner = Owner {
        _buffer: src,
        drops: Arc::clone(&drops),
    };
    // SAFETY: the range is the owner's CUDA buffer (4096 f32), alive while the owner is.
    let t = unsafe { export_raw(Box::new(owner), raw, &ExportOptions::default(), false) }.unwrap();
    let mut reg = Registry::new();
    reg.register_backend(bridge_cuda::backend());
    reg.register_dlpack(bridge_cuda::dlpack::exchange());
    let plan = reg
        .plan_from_dlpack(&t, MemoryType::Cuda, Device::Cuda(0))
        .unwrap();
    assert!(plan.is_zero_copy(), "{plan}");
    let imported = reg
        .from_dlpack(t, MemoryType::Cuda, Device::Cuda(0))
        .unwrap();
    let st = storage_of(&imported.array).unwrap();
    assert!(st.is_foreign());
    assert_eq!(st.device_ptr(), ptr);
    let host = g.download(&imported.array).unwrap();
    assert_eq!(host.to_c_bytes(), ramp(4096).to_c_bytes());
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(imported);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

/// A strided CUDA tensor (steps, a transpose, a negative stride, u8 and f64 elements) is
/// gathered into a C-contiguous array on the device with the right values; the producer's
/// deleter runs once the gather is done; the registry reports a device copy.
#[test]
fn strided_cuda_tensor_is_gathered() {
    let Some(g) = gpu_or_skip() else { return };
    struct Owner {
        _buffer: Array,
        drops: Arc<AtomicUsize>,
    }
    impl Drop for Owner {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }
    // (host data, element offset of [0, ...], shape, strides)
    let f32_ramp = ramp(64);
    let u8_ramp = HostData::U8(ndarray::ArrayD::from_shape_fn(vec![24], |i| i[0] as u8));
    let f64_ramp = HostData::F64(ndarray::ArrayD::from_shape_fn(vec![30], |i| {
        i[0] as f64 * 0.5
    }));
    let cases: Vec<(&HostData, usize, Vec<usize>, Vec<isize>)> = vec![
        (&f32_ramp, 0, vec![8, 4], vec![8, 2]),
        (&u8_ramp, 0, vec![6, 4], vec![1, 6]),
        (&f64_ramp, 29, vec![3, 5], vec![-10, -1]),
        (&f32_ramp, 3, vec![2, 1, 5], vec![20, 0, 7]),
    ];
    let mut reg = Registry::new();
    reg.register_backend(bridge_cuda::backend());
    reg.register_dlpack(bridge_cuda::dlpack::exchange());
    for (host, first, shape, strides) in cases {
        let drops = Arc::new(AtomicUsize::new(0));
        let src = g.upload(host).unwrap();
        let es = host.dtype().size_of();
        let raw = RawParts {
            data: (storage_of(&src).unwrap().device_ptr() as usize + first * es)
                as *mut std::ffi::c_void,
            shape: shape.clone(),
            strides: strides.clone(),
            dtype: host.dtype(),
            device: dl_device(Device::Cuda(0)),
        };
        let owner = Owner {
            _buffer: src,
            drops: Arc::clone(&drops),
        };
        // SAFETY: every addressed element lies in the owner's buffer, alive while it is.
        let t =
            unsafe { export_raw(Box::new(owner), raw, &ExportOptions::default(), false) }.unwrap();
        let plan = reg
            .plan_from_dlpack(&t, MemoryType::Cuda, Device::Cuda(0))
            .unwrap();
        assert_eq!(plan.steps[0].kind, TransferKind::DeviceCopy, "{plan}");
        let imported = reg
            .from_dlpack(t, MemoryType::Cuda, Device::Cuda(0))
            .unwrap();
        assert_eq!(imported.route.steps[0].kind, TransferKind::DeviceCopy);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "released after the gather");
        assert_eq!(imported.array.shape(), &shape[..]);
        assert!(!storage_of(&imported.array).unwrap().is_foreign());
        let got = g
            .download(&imported.array)
            .unwrap()
            .to_c_bytes()
            .into_owned();
        let all = host.to_c_bytes();
        let n: usize = shape.iter().product();
        let mut want = Vec::with_capacity(n * es);
        for i in 0..n {
            let (mut rem, mut off) = (i, first as isize);
            for d in (0..shape.len()).rev() {
                off += (rem % shape[d]) as isize * strides[d];
                rem /= shape[d];
            }
            let o = off as usize * es;
            want.extend_from_slice(&all[o..o + es]);
        }
        assert_eq!(got, want, "shape {shape:?} strides {strides:?}");
    }
}

/// Stream semantics: a buffer whose upload is still in flight (non-blocking, on stream A) is
/// exported for consumer stream B; a copy queued on B right away reads the uploaded data,
/// because B waits on the producer's event (no host or device synchronisation in between).
#[test]
fn consumer_stream_waits_for_the_producer() {
    let Some(g) = gpu_or_skip() else { return };
    let n = 8 << 20; // 32 MiB: the upload is still running when the export returns
    let h = ramp(n);
    let a_stream = g.new_stream().unwrap();
    let (a, _ready) = g.upload_async(&h, &a_stream).unwrap();
    let consumer = ImportStream::new(0).unwrap();
    let opts = ExportOptions {
        stream: ConsumerStream::Handle(consumer.handle()),
        ..Default::default()
    };
    let out = export(a, &opts).unwrap();
    let mut back = vec![0f32; n];
    // SAFETY: the exported range holds n floats, alive while `out` lives; the copy runs on
    // the consumer stream, synchronised before `back` is read.
    unsafe {
        cudarc::driver::result::memcpy_dtoh_async(
            &mut back,
            out.tensor.info().data as cudarc::driver::sys::CUdeviceptr,
            consumer.handle() as CUstream,
        )
    }
    .unwrap();
    consumer.finish().unwrap();
    assert!(back.iter().enumerate().all(|(i, &v)| v == i as f32));
    // No-sync and the default streams are accepted too.
    for stream in [
        ConsumerStream::NoSync,
        ConsumerStream::Omitted,
        ConsumerStream::LegacyDefault,
        ConsumerStream::PerThreadDefault,
    ] {
        let a = g.upload(&ramp(16)).unwrap();
        let opts = ExportOptions {
            stream,
            ..Default::default()
        };
        assert!(export(a, &opts).is_ok(), "{stream:?}");
    }
}

/// The exported tensor keeps its memory after the array variable, the registry and the
/// stream are gone; the deleter (on another thread) returns it.
#[test]
fn deleter_after_teardown() {
    let Some(g) = gpu_or_skip() else { return };
    let t = {
        let mut reg = Registry::new();
        reg.register_backend(bridge_cuda::backend());
        reg.register_dlpack(bridge_cuda::dlpack::exchange());
        let a = g.upload(&ramp(256)).unwrap();
        reg.to_dlpack(a, &ExportOptions::default()).unwrap().tensor
    };
    let in_use = g.pool().stats().in_use;
    assert!(in_use > 0);
    std::thread::spawn(move || drop(t)).join().unwrap();
    assert!(g.pool().stats().in_use < in_use);
}
