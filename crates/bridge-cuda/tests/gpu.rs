#![allow(clippy::unwrap_used, clippy::expect_used)]
//! GPU tests. They skip without a CUDA device and FAIL when `ARRAYBRIDGE_REQUIRE_GPU=1`.

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use bridge_core::convert::{ConversionObserver, ConversionRecord, Registry, TransferKind};
use bridge_core::oom::{RetryPolicy, with_oom_retry};
use bridge_core::{Array, BridgeError, DType, Device, HostData, MemoryType};
use bridge_cuda::device::STAGING_CHUNK;
use bridge_cuda::kernel::KERNELS;
use bridge_cuda::{Gpu, HostPath, KernelArg, gpu, probe, storage_of};
use rand::{Rng, SeedableRng, rngs::StdRng};
use test_support::require::{GPU as REQUIRE_GPU, skip};

/// The OOM test sets a pool limit; it takes this lock exclusively, every other test shares it.
static EXCLUSIVE: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    EXCLUSIVE.read().unwrap_or_else(|p| p.into_inner())
}

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

fn random(dtype: DType, shape: &[usize], seed: u64) -> HostData {
    let n: usize = shape.iter().product::<usize>() * dtype.size_of();
    let mut bytes = vec![0u8; n];
    StdRng::seed_from_u64(seed).fill(&mut bytes[..]);
    HostData::from_c_bytes(dtype, shape, &bytes).unwrap()
}

fn same(a: &HostData, b: &HostData) {
    assert_eq!(a.dtype(), b.dtype());
    assert_eq!(a.shape(), b.shape());
    assert!(
        a.to_c_bytes() == b.to_c_bytes(),
        "contents differ ({} {:?})",
        a.dtype(),
        a.shape()
    );
}

#[test]
fn devices_report_name_uuid_memory() {
    let _s = shared();
    let Some(_g) = gpu_or_skip() else { return };
    let infos = bridge_cuda::backend().devices().unwrap();
    assert!(!infos.is_empty());
    for i in &infos {
        assert!(
            i.uuid
                .as_deref()
                .is_some_and(|u| u.starts_with("GPU-") && u.len() == 40),
            "{i:?}"
        );
        assert!(i.total_memory.unwrap() > 0 && i.free_memory.is_some());
        assert!(i.capabilities.compute_capability.is_some());
        eprintln!(
            "{}: {} cc {:?} uuid {:?}",
            i.device, i.name, i.capabilities.compute_capability, i.uuid
        );
    }
}

/// `read_bytes`: any sub-range of a buffer, bounds checked.
#[test]
fn read_bytes_ranges() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let h = random(DType::U8, &[10_000], 7);
    let bytes = h.to_c_bytes().into_owned();
    let d = g.upload(&h).unwrap();
    for (off, len) in [
        (0, 0),
        (0, 4),
        (0, 10_000),
        (3, 997),
        (9_999, 1),
        (5_000, 5_000),
    ] {
        let mut out = vec![0u8; len];
        g.read_bytes(&d, off, &mut out).unwrap();
        assert_eq!(out, bytes[off..off + len], "{off}+{len}");
    }
    let mut out = vec![0u8; 2];
    let e = g.read_bytes(&d, 9_999, &mut out).unwrap_err();
    assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
    assert!(g.read_bytes(&d, usize::MAX, &mut out).is_err());
}

#[test]
fn round_trip_every_dtype_both_paths() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let big = STAGING_CHUNK * 2 + 12_345; // three staging chunks, the last one partial
    for (k, dtype) in DType::ALL.into_iter().enumerate() {
        for shape in [
            vec![0usize],
            vec![1],
            vec![3, 5, 7],
            vec![big / dtype.size_of()],
        ] {
            let h = random(dtype, &shape, k as u64);
            for path in [HostPath::Pageable, HostPath::PinnedStaged] {
                let d = g.upload_with(&h, path).unwrap();
                assert_eq!((d.dtype(), d.shape()), (dtype, &shape[..]));
                assert_eq!(d.memory_type(), MemoryType::Cuda);
                for back_path in [HostPath::Pageable, HostPath::PinnedStaged] {
                    same(&h, &g.download_with(&d, back_path).unwrap());
                }
                same(&h, &g.download(&g.copy(&d).unwrap()).unwrap());
                // into a caller's buffer, reused (dirty) from one download to the next
                let mut buf = vec![0xA5u8; h.to_c_bytes().len()];
                for _ in 0..2 {
                    g.download_into(&d, &mut buf).unwrap();
                    assert_eq!(&buf[..], &h.to_c_bytes()[..], "{dtype} {shape:?}");
                }
            }
        }
    }
    // a buffer of the wrong size is refused, untouched
    let d = g.upload(&random(DType::F32, &[10], 1)).unwrap();
    let mut short = vec![1u8; 39];
    assert!(matches!(
        g.download_into(&d, &mut short),
        Err(BridgeError::InvalidArgument { .. })
    ));
    assert!(short.iter().all(|&b| b == 1));
}

/// The transfer knobs, each in a run of its own (they are read once per process): host ranges
/// page-locked in place (`ARRAYBRIDGE_HOST_REGISTER_MB=1`: every copy of at least 1 MiB, its
/// 64 KiB-aligned interior registered, the bytes around it plain copies, eight threads at once)
/// and whole staging chunks (`ARRAYBRIDGE_STAGING_ADAPT=0`, the old cut) give every byte back.
#[test]
fn transfer_knobs_give_every_byte_back() {
    let Some(_g) = gpu_or_skip() else { return };
    for env in [
        ("ARRAYBRIDGE_HOST_REGISTER_MB", "1"),
        ("ARRAYBRIDGE_STAGING_ADAPT", "0"),
    ] {
        test_support::rerun_with_env(
            &[env],
            &["round_trip_every_dtype_both_paths", "eight_threads"],
        );
    }
}

#[test]
fn non_contiguous_views() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let a = ndarray::Array3::from_shape_fn((4, 6, 5), |(i, j, k)| (i * 100 + j * 10 + k) as f32);
    let t = a.clone().permuted_axes([2, 0, 1]).into_dyn();
    let s = a.slice(ndarray::s![.., ..;2, 1..]).to_owned();
    let strided = a.slice_move(ndarray::s![..;-1, ..;3, ..]).into_dyn();
    for view in [t, s.into_dyn(), strided] {
        let expect = view.as_standard_layout().to_owned();
        let d = g.upload(&HostData::F32(view)).unwrap();
        let back = g.download(&d).unwrap();
        assert_eq!(back, HostData::F32(expect));
    }
}

#[test]
fn eight_threads() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let g = Arc::clone(&g);
            s.spawn(move || {
                for i in 0..6 {
                    let dtype = DType::ALL[((t + i) % 8) as usize];
                    let h = random(dtype, &[(t as usize + 1) * 300_007], t * 31 + i);
                    let path = if i % 2 == 0 {
                        HostPath::PinnedStaged
                    } else {
                        HostPath::Pageable
                    };
                    let d = g.upload_with(&h, path).unwrap();
                    let d2 = g.copy(&d).unwrap();
                    drop(d);
                    same(&h, &g.download(&d2).unwrap());
                }
            });
        }
    });
}

#[test]
fn registry_conversions_record_the_route() {
    let _s = shared();
    let Some(_g) = gpu_or_skip() else { return };
    #[derive(Default)]
    struct Rec(Mutex<Vec<ConversionRecord>>);
    impl ConversionObserver for Rec {
        fn on_conversion(&self, r: &ConversionRecord) {
            self.0.lock().unwrap().push(r.clone());
        }
    }
    let rec = Arc::new(Rec::default());
    let mut reg = Registry::new();
    reg.register_backend(bridge_cuda::backend());
    reg.set_observer(Some(rec.clone()));
    let h = random(DType::I64, &[1000, 3], 7);
    let d = reg
        .convert(
            Array::from_host(h.clone()),
            MemoryType::Cuda,
            Device::Cuda(0),
        )
        .unwrap();
    let back = reg.convert(d, MemoryType::Host, Device::Cpu).unwrap();
    same(&h, back.host().unwrap());
    let recs = rec.0.lock().unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].route.kind(), TransferKind::PinnedStaged);
    assert_eq!(recs[0].bytes_moved, 24_000);
}

#[test]
fn peer_or_staged_copy_between_gpus() {
    let _s = shared();
    let Some(_g) = gpu_or_skip() else { return };
    let n = probe::device_count().unwrap();
    if n < 2 {
        eprintln!("skipped: one GPU only; the pinned-staged and peer paths need two");
        return;
    }
    let mut reg = Registry::new();
    reg.register_backend(bridge_cuda::backend());
    let h = random(DType::F32, &[STAGING_CHUNK / 2 + 77], 3);
    let a = reg
        .convert(
            Array::from_host(h.clone()),
            MemoryType::Cuda,
            Device::Cuda(0),
        )
        .unwrap();
    let route = reg
        .plan(
            MemoryType::Cuda,
            Device::Cuda(0),
            MemoryType::Cuda,
            Device::Cuda(1),
        )
        .unwrap();
    let expect = if bridge_cuda::backend().can_access_peer(Device::Cuda(0), Device::Cuda(1)) {
        TransferKind::PeerCopy
    } else {
        TransferKind::PinnedStaged
    };
    assert_eq!(route.kind(), expect);
    let b = reg.convert(a, MemoryType::Cuda, Device::Cuda(1)).unwrap();
    assert_eq!(b.device(), Device::Cuda(1));
    // Both explicit paths work regardless of what the planner chose.
    let g1 = gpu(1).unwrap();
    let staged = g1
        .copy_from(
            &gpu(0).unwrap().upload(&h).unwrap(),
            TransferKind::PinnedStaged,
        )
        .unwrap();
    same(&h, &g1.download(&staged).unwrap());
    same(&h, &g1.download(&b).unwrap());
}

#[test]
fn cross_device_paths_on_one_gpu() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let h = random(DType::BF16, &[STAGING_CHUNK + 4099], 11);
    let a = g.upload(&h).unwrap();
    for kind in [
        TransferKind::PinnedStaged,
        TransferKind::PeerCopy,
        TransferKind::DeviceCopy,
    ] {
        let b = g.copy_from(&a, kind).unwrap();
        same(&h, &g.download(&b).unwrap());
    }
}

#[test]
fn oom_with_limit_and_retry() {
    let _x = EXCLUSIVE.write().unwrap_or_else(|p| p.into_inner());
    let Some(_) = gpu_or_skip() else { return };
    // A device of its own so that the limit does not disturb other tests: use the last one.
    let g = gpu(probe::device_count().unwrap() - 1).unwrap();
    let total = g.info().total_memory.unwrap();
    g.release();
    g.set_memory_limit(0.05).unwrap();
    let limit = (total as f64 * 0.05) as u64;
    let chunk = (limit / 3) as usize;
    let held = Mutex::new(vec![
        g.alloc(DType::U8, &[chunk]).unwrap(),
        g.alloc(DType::U8, &[chunk]).unwrap(),
    ]);
    let e = g.alloc(DType::U8, &[chunk * 2]).unwrap_err();
    assert!(matches!(e, BridgeError::OutOfMemory { .. }), "{e}");
    let stats = g.memory_stats().unwrap();
    assert!(stats.pool_in_use >= 2 * chunk as u64 && stats.free.is_some());
    // Retry: the first failure frees what we hold, the second attempt fits.
    let mut reg = Registry::new();
    reg.register_backend(bridge_cuda::backend());
    let mut attempts = 0;
    let got = with_oom_retry(&RetryPolicy::default(), g.device(), &reg, || {
        attempts += 1;
        if attempts == 2 {
            held.lock().unwrap().clear();
        }
        g.alloc(DType::U8, &[chunk * 2])
    })
    .unwrap();
    assert_eq!(attempts, 2);
    assert_eq!(got.nbytes(), chunk * 2);
    drop(got);
    g.clear_memory_limit();
    assert!(g.release() > 0);
    // A real device OOM (beyond physical memory) is OutOfMemory too.
    let e = g.alloc(DType::U8, &[(total * 2) as usize]).unwrap_err();
    assert!(e.is_oom(), "{e}");
}

#[test]
fn portable_kernels_launch() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let n = 100_003usize;
    let x = ndarray::ArrayD::from_shape_fn(vec![n], |i| i[0] as f32 - 50_000.0);
    let xd = g.upload(&HostData::F32(x.clone())).unwrap();
    let yd = g.zeros(DType::F32, &[n]).unwrap();
    let axpy = g.program(&KERNELS[0], &["-DREAL=float"]).unwrap();
    let args = [
        KernelArg::Buf(storage_of(&yd).unwrap()),
        KernelArg::Buf(storage_of(&xd).unwrap()),
        KernelArg::F32(2.0),
        KernelArg::U32(n as u32),
    ];
    g.launch(&axpy, "axpy", &[n], None, &args, None).unwrap();
    let y = g.download(&yd).unwrap();
    assert_eq!(y, HostData::F32(x.mapv(|v| 2.0 * v)));
    // Wrong argument types are refused, not launched.
    let bad = [
        KernelArg::Buf(storage_of(&yd).unwrap()),
        KernelArg::Buf(storage_of(&xd).unwrap()),
        KernelArg::F64(2.0),
        KernelArg::U32(n as u32),
    ];
    assert!(g.launch(&axpy, "axpy", &[n], None, &bad, None).is_err());
    // Non-blocking: an event the consumer waits on; LOCAL + BARRIER + atomics.
    let count = g.zeros(DType::I32, &[1]).unwrap();
    let prog = g.program(&KERNELS[1], &[]).unwrap();
    let stream = g.new_stream().unwrap();
    let ready = g
        .launch(
            &prog,
            "count_positive",
            &[n],
            Some(&[256]),
            &[
                KernelArg::Buf(storage_of(&xd).unwrap()),
                KernelArg::U32(n as u32),
                KernelArg::Buf(storage_of(&count).unwrap()),
            ],
            Some(&stream),
        )
        .unwrap()
        .unwrap();
    ready.synchronize().unwrap();
    assert!(ready.is_complete());
    let c = g.download(&count).unwrap();
    assert_eq!(
        c,
        HostData::I32(ndarray::arr1(&[(n - 50_001) as i32]).into_dyn())
    );
    // Cache: same program object on the second request.
    assert!(Arc::ptr_eq(
        &axpy,
        &g.program(&KERNELS[0], &["-DREAL=float"]).unwrap()
    ));
}

#[test]
fn async_upload_then_consumer_waits() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let h = random(DType::U16, &[3_000_000], 9);
    let producer = g.new_stream().unwrap();
    let consumer = g.new_stream().unwrap();
    let (d, ready) = g.upload_async(&h, &producer).unwrap();
    ready.wait_on(&consumer).unwrap();
    consumer.synchronize().unwrap();
    assert!(ready.is_complete());
    same(&h, &g.download(&d).unwrap());
    assert!(storage_of(&d).is_ok());
}

/// Owner of foreign memory in the tests: a pool buffer plus a flag raised when it is dropped.
struct FakeOwner {
    _storage: bridge_cuda::CudaStorage,
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for FakeOwner {
    fn drop(&mut self) {
        self.dropped
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn foreign_memory_is_wrapped_kept_alive_and_never_pooled() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let data = random(DType::F32, &[64, 33], 7);
    let a = g.upload(&data).unwrap();
    let (inner, shape, dtype) = a
        .into_storage::<bridge_cuda::CudaStorage>()
        .map_err(|_| "not CUDA")
        .unwrap();
    let ptr = inner.device_ptr();
    let n = data.to_c_bytes().len();
    let dropped = Arc::new(AtomicBool::new(false));
    let owner = FakeOwner {
        _storage: *inner,
        dropped: Arc::clone(&dropped),
    };
    // SAFETY: the range is the owner's pool buffer, complete after `upload`.
    let foreign =
        unsafe { bridge_cuda::CudaStorage::from_foreign(&g, ptr, n, Box::new(owner)) }.unwrap();
    assert!(foreign.is_foreign());
    assert_eq!(foreign.device_ptr(), ptr);
    assert!(foreign.foreign_owner().unwrap().is::<FakeOwner>());
    let b = Array::from_storage(Box::new(foreign), shape.clone(), dtype).unwrap();
    same(&g.download(&b).unwrap(), &data);
    // Writes through the foreign handle land in the owner's memory.
    storage_of(&b).unwrap().fill_bytes(0).unwrap();
    assert!(g.download(&b).unwrap().to_c_bytes().iter().all(|&x| x == 0));
    assert!(!dropped.load(Ordering::SeqCst));
    // Export/import keeps the same pointer and owner.
    let (st, shape, dtype) = b
        .into_storage::<bridge_cuda::CudaStorage>()
        .map_err(|_| "not CUDA")
        .unwrap();
    let ex = st.export().unwrap();
    assert_eq!((ex.device_ptr(), ex.nbytes(), ex.ordinal()), (ptr, n, 0));
    let b = Array::from_storage(Box::new(ex.into_storage()), shape, dtype).unwrap();
    drop(b);
    assert!(
        dropped.load(Ordering::SeqCst),
        "owner released with the storage"
    );
    // SAFETY: rejected before anything is wrapped (null pointer).
    let z = unsafe { bridge_cuda::CudaStorage::from_foreign(&g, 0, 16, Box::new(())) };
    assert!(matches!(z, Err(BridgeError::InvalidArgument { .. })));
}

#[test]
fn foreign_owner_can_be_taken_back() {
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let pool = Box::new(bridge_cuda::CudaStorage::alloc(&g, 64).unwrap());
    let pool = pool.into_foreign_owner().unwrap_err();
    assert!(!pool.is_foreign());
    let ptr = pool.device_ptr();
    // SAFETY: the range is `pool`'s buffer, which becomes the owner.
    // (`pool` is already a box: it becomes the owner as is, not boxed again)
    let f = unsafe { bridge_cuda::CudaStorage::from_foreign(&g, ptr, 64, pool) }.unwrap();
    let owner = Box::new(f).into_foreign_owner().unwrap();
    let back = owner.downcast::<bridge_cuda::CudaStorage>().unwrap();
    assert_eq!(back.device_ptr(), ptr);
}

/// Uploads filled in place (`Executor::upload_filled`, detection's and `locate`'s packed
/// frames): page-locked buffers from a ring of three, sent asynchronously; more uploads than
/// the ring holds (it must wait for a copy before reusing a buffer), sizes above and below the
/// direct-copy limit and a larger one after smaller ones (a buffer too small is replaced), read
/// back byte for byte while the earlier buffers are still alive; a failing `fill` uploads
/// nothing and leaves the ring usable.
#[test]
fn uploads_filled_in_place_arrive_whole() {
    use bridge_core::exec::{Executor, TypedExecutor};
    let _s = shared();
    let Some(g) = gpu_or_skip() else { return };
    let e = bridge_cuda::CudaExecutor::from_gpu(g).unwrap();
    let mut scratch = Vec::new();
    let mut kept = Vec::new();
    for (i, n) in [
        3_000_000usize,
        5_000_000,
        100,
        4_000_000,
        7_000_001,
        2_500_000,
    ]
    .into_iter()
    .enumerate()
    {
        let want: Vec<u16> = (0..n)
            .map(|j| (j as u64 * 2_654_435_761 + i as u64) as u16)
            .collect();
        let buf = e
            .upload_filled_elems(n, &mut scratch, |d: &mut [u16]| {
                d.copy_from_slice(&want);
                Ok(())
            })
            .unwrap();
        kept.push((buf, want));
    }
    for (buf, want) in &kept {
        let got = e.read(buf.raw(), want.len() * 2).unwrap();
        assert_eq!(got, bytemuck::cast_slice::<u16, u8>(want));
    }
    let err = e
        .upload_filled_elems::<f32>(1 << 20, &mut scratch, |_| {
            Err(BridgeError::invalid_argument("fill", "refused"))
        })
        .unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
    let again = e
        .upload_filled_elems(1 << 20, &mut scratch, |d: &mut [f32]| {
            d.iter_mut().enumerate().for_each(|(j, v)| *v = j as f32);
            Ok(())
        })
        .unwrap();
    let got = e.read(again.raw(), 4 << 20).unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&got)[12_345], 12_345.0);
}
