#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Tests that need neither a GPU nor libcuda: planner routes for CUDA pairs, error mapping from
//! driver result codes, pool accounting and limits with a fake allocator, launch geometry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bridge_core::convert::{Registry, Topology, TransferKind, plan_route};
use bridge_core::memory::{CachingPool, MemoryLimit, RawAllocator};
use bridge_core::{BridgeError, Device, MemoryType};
use bridge_cuda::convert::{converters, converters_with, cuda_pair_kind};
use bridge_cuda::error::check;
use bridge_cuda::kernel::LaunchDims;
use bridge_cuda::{HostPath, format_uuid, probe};
use cudarc::driver::sys::CUresult;

/// Four fake GPUs: 0↔1 have peer access, 2 and 3 have none; `torch:cuda:0` is GPU 0.
fn topology() -> Topology {
    let mut t = Topology::host_only();
    for i in 0..4 {
        t.add_device(
            Device::Cuda(i),
            Some(format!("GPU-0000000{i}-aaaa-bbbb-cccc-000000000000")),
        );
    }
    t.add_device(
        Device::TorchCuda(0),
        Some("GPU-00000000-aaaa-bbbb-cccc-000000000000".into()),
    );
    t.add_peer(Device::Cuda(0), Device::Cuda(1));
    t.add_peer(Device::Cuda(1), Device::Cuda(0));
    t
}

fn route(
    t: &Topology,
    path: HostPath,
    a: (MemoryType, Device),
    b: (MemoryType, Device),
) -> bridge_core::Result<Vec<TransferKind>> {
    plan_route(t, &converters_with(path), a.0, a.1, b.0, b.1)
        .map(|r| r.steps.iter().map(|s| s.kind).collect())
}

#[test]
fn planner_routes_for_cuda_pairs() {
    let t = topology();
    let host = (MemoryType::Host, Device::Cpu);
    let c = |i| (MemoryType::Cuda, Device::Cuda(i));
    let staged = HostPath::PinnedStaged;
    assert_eq!(
        route(&t, staged, host, c(0)).unwrap(),
        [TransferKind::PinnedStaged]
    );
    assert_eq!(
        route(&t, staged, c(3), host).unwrap(),
        [TransferKind::PinnedStaged]
    );
    assert_eq!(
        route(&t, HostPath::Pageable, host, c(2)).unwrap(),
        [TransferKind::HostCopy]
    );
    assert_eq!(
        route(&t, HostPath::Pageable, c(2), host).unwrap(),
        [TransferKind::HostCopy]
    );
    // Peers copy directly, both ways.
    assert_eq!(
        route(&t, staged, c(0), c(1)).unwrap(),
        [TransferKind::PeerCopy]
    );
    assert_eq!(
        route(&t, staged, c(1), c(0)).unwrap(),
        [TransferKind::PeerCopy]
    );
    // No peer access: one pinned-staged hop, not two hops through an ndarray.
    assert_eq!(
        route(&t, staged, c(0), c(2)).unwrap(),
        [TransferKind::PinnedStaged]
    );
    assert_eq!(
        route(&t, staged, c(3), c(1)).unwrap(),
        [TransferKind::PinnedStaged]
    );
    // Same device: in place.
    assert!(route(&t, staged, c(2), c(2)).unwrap().is_empty());
    // Unknown ordinal.
    assert!(matches!(
        route(&t, staged, host, c(9)),
        Err(BridgeError::UnknownDevice { .. })
    ));
    // CUDA memory cannot be on an OpenCL device.
    assert!(matches!(
        route(&t, staged, host, (MemoryType::Cuda, Device::OpenCl(0))),
        Err(BridgeError::InvalidPlacement { .. })
    ));
}

#[test]
fn pair_kind_uses_uuids_and_peers() {
    let mut t = topology();
    assert_eq!(
        cuda_pair_kind(Device::Cuda(0), Device::Cuda(1), &t),
        Some(TransferKind::PeerCopy)
    );
    assert_eq!(
        cuda_pair_kind(Device::Cuda(2), Device::Cuda(3), &t),
        Some(TransferKind::PinnedStaged)
    );
    // Two ordinals with one UUID are one GPU (e.g. different CUDA_VISIBLE_DEVICES views).
    t.add_device(
        Device::Cuda(5),
        Some("GPU-00000002-aaaa-bbbb-cccc-000000000000".into()),
    );
    assert_eq!(
        cuda_pair_kind(Device::Cuda(2), Device::Cuda(5), &t),
        Some(TransferKind::DeviceCopy)
    );
    assert!(t.same_physical(Device::Cuda(0), Device::TorchCuda(0)));
    assert_eq!(cuda_pair_kind(Device::Cpu, Device::Cuda(0), &t), None);
}

#[test]
fn route_shows_in_a_registry_plan() {
    let mut reg = Registry::new();
    *reg.topology_mut() = topology();
    for c in converters() {
        reg.register_converter(c);
    }
    let r = reg
        .plan(
            MemoryType::Cuda,
            Device::Cuda(0),
            MemoryType::Cuda,
            Device::Cuda(1),
        )
        .unwrap();
    assert_eq!(r.kind(), TransferKind::PeerCopy);
    assert!(r.to_string().contains("peer-copy"), "{r}");
    let r = reg
        .plan(
            MemoryType::Cuda,
            Device::Cuda(0),
            MemoryType::Cuda,
            Device::Cuda(3),
        )
        .unwrap();
    assert!(r.to_string().contains("pinned-staged"), "{r}");
}

#[test]
fn backend_without_driver_is_unavailable_not_a_panic() {
    if probe::driver().is_ok() {
        eprintln!("skipped: a CUDA driver is present here");
        return;
    }
    let b = bridge_cuda::backend();
    assert!(matches!(
        b.devices(),
        Err(BridgeError::BackendUnavailable { .. })
    ));
    assert!(!b.can_access_peer(Device::Cuda(0), Device::Cuda(1)));
    assert_eq!(b.release_pool(Device::Cuda(0)), 0);
    assert!(matches!(
        b.memory_stats(Device::Cuda(0)),
        Err(BridgeError::BackendUnavailable { .. })
    ));
    assert!(matches!(
        bridge_cuda::gpu(0),
        Err(BridgeError::BackendUnavailable { .. })
    ));
    let mut reg = Registry::new();
    reg.register_backend(b);
    let err = reg
        .plan(
            MemoryType::Host,
            Device::Cpu,
            MemoryType::Cuda,
            Device::Cuda(0),
        )
        .unwrap_err();
    assert!(
        matches!(err, BridgeError::BackendUnavailable { .. }),
        "{err}"
    );
    assert!(
        reg.reports()
            .iter()
            .any(|r| r.name == "cuda" && r.unavailable.is_some())
    );
}

#[test]
fn error_mapping_from_result_codes() {
    let d = Device::Cuda(1);
    assert!(check(CUresult::CUDA_SUCCESS, d, 0, "x").is_ok());
    let e = check(CUresult::CUDA_ERROR_OUT_OF_MEMORY, d, 4096, "cuMemAlloc").unwrap_err();
    assert!(e.is_oom());
    assert!(matches!(
        e,
        BridgeError::OutOfMemory {
            device: Device::Cuda(1),
            requested: 4096,
            attempts: 1
        }
    ));
    for code in [
        CUresult::CUDA_ERROR_INVALID_VALUE,
        CUresult::CUDA_ERROR_NOT_INITIALIZED,
        CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        CUresult::CUDA_ERROR_NO_DEVICE,
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
    ] {
        let e = check(code, d, 4096, "op").unwrap_err();
        assert!(!e.is_oom(), "{code:?} must not be OOM");
        match e {
            BridgeError::Backend {
                backend,
                code: Some(c),
                message,
            } => {
                assert_eq!(backend, "cuda");
                assert_eq!(c, code as i64);
                assert!(message.contains(&format!("{code:?}")), "{message}");
            }
            other => panic!("{code:?} mapped to {other:?}"),
        }
    }
    let e = bridge_cuda::error::driver(
        cudarc::driver::DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        d,
        8,
        "x",
    );
    assert!(e.is_oom());
}

/// A fake device of `capacity` bytes that fails like the driver does.
struct FakeCuda {
    capacity: u64,
    used: Arc<AtomicU64>,
    fail_with: Option<CUresult>,
}

impl RawAllocator for FakeCuda {
    type Block = usize;
    fn device(&self) -> Device {
        Device::Cuda(0)
    }
    fn total_memory(&self) -> u64 {
        self.capacity
    }
    fn allocate(&self, bytes: usize) -> bridge_core::Result<usize> {
        if let Some(code) = self.fail_with {
            check(code, Device::Cuda(0), bytes as u64, "cuMemAlloc")?;
        }
        let used = self.used.load(Ordering::SeqCst);
        if used + bytes as u64 > self.capacity {
            check(
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                Device::Cuda(0),
                bytes as u64,
                "cuMemAlloc",
            )?;
        }
        self.used.fetch_add(bytes as u64, Ordering::SeqCst);
        Ok(bytes)
    }
    fn free(&self, block: usize) {
        self.used.fetch_sub(block as u64, Ordering::SeqCst);
    }
}

fn fake(capacity: u64, fail_with: Option<CUresult>) -> (CachingPool<FakeCuda>, Arc<AtomicU64>) {
    let used = Arc::new(AtomicU64::new(0));
    let pool = CachingPool::new(FakeCuda {
        capacity,
        used: Arc::clone(&used),
        fail_with,
    });
    (pool, used)
}

#[test]
fn pool_accounting_and_reuse() {
    let (pool, used) = fake(1 << 20, None);
    let a = pool.allocate(1000).unwrap();
    let b = pool.allocate(5000).unwrap();
    let s = pool.stats();
    assert_eq!(
        (s.in_use, s.reserved, s.device_allocs),
        (1024 + 5120, 1024 + 5120, 2)
    );
    drop(a);
    let s = pool.stats();
    assert_eq!((s.in_use, s.cached, s.reserved), (5120, 1024, 6144));
    let c = pool.allocate(900).unwrap(); // served from the cache
    assert_eq!(pool.stats().cache_hits, 1);
    drop((b, c));
    assert_eq!(pool.stats().in_use, 0);
    assert_eq!(pool.release(), 6144);
    assert_eq!(used.load(Ordering::SeqCst), 0);
    assert_eq!(pool.stats().reserved, 0);
}

#[test]
fn pool_limit_fraction_is_enforced() {
    let (pool, _) = fake(1_000_000, None);
    pool.set_limit(Some(MemoryLimit::fraction(0.8).unwrap()));
    assert_eq!(pool.stats().limit, Some(800_000));
    let a = pool.allocate(500_000).unwrap();
    let e = pool.allocate(400_000).unwrap_err();
    assert!(e.is_oom(), "{e}");
    drop(a);
    // The cached 500 KB block is released to make room.
    let b = pool.allocate(700_000).unwrap();
    assert_eq!(pool.stats().reserved, b.size() as u64);
    assert!(MemoryLimit::fraction(1.5).is_err());
    assert!(MemoryLimit::fraction(0.0).is_err());
}

#[test]
fn device_oom_releases_cache_and_retries() {
    let (pool, used) = fake(10_240, None);
    let a = pool.allocate(8192).unwrap();
    drop(a); // cached, still held from the fake device
    assert_eq!(used.load(Ordering::SeqCst), 8192);
    // A different size does not fit next to the cached block: the pool releases and retries.
    let b = pool.allocate(9000).unwrap();
    assert_eq!(used.load(Ordering::SeqCst), b.size() as u64);
    // Truly too big: OutOfMemory, typed.
    let e = pool.allocate(20_000).unwrap_err();
    assert!(matches!(e, BridgeError::OutOfMemory { .. }), "{e}");
}

#[test]
fn other_driver_errors_are_not_oom_and_not_retried() {
    let (pool, _) = fake(1 << 20, Some(CUresult::CUDA_ERROR_INVALID_VALUE));
    let e = pool.allocate(100).unwrap_err();
    assert!(!e.is_oom());
    assert!(
        matches!(e, BridgeError::Backend { code: Some(1), .. }),
        "{e}"
    );
    assert_eq!(pool.stats().device_allocs, 0);
}

#[test]
fn launch_geometry() {
    let d = LaunchDims::new(&[1000], None).unwrap();
    assert_eq!((d.grid, d.block), ((4, 1, 1), (256, 1, 1)));
    let d = LaunchDims::new(&[10], None).unwrap();
    assert_eq!((d.grid, d.block), ((1, 1, 1), (10, 1, 1)));
    let d = LaunchDims::new(&[100, 33], Some(&[16, 16])).unwrap();
    assert_eq!((d.grid, d.block), ((7, 3, 1), (16, 16, 1)));
    let d = LaunchDims::new(&[0], None).unwrap();
    assert_eq!(d.grid, (1, 1, 1));
    assert!(LaunchDims::new(&[], None).is_err());
    assert!(LaunchDims::new(&[1, 2, 3, 4], None).is_err());
    assert!(LaunchDims::new(&[64, 64], Some(&[64, 32])).is_err()); // 2048 threads
    assert!(LaunchDims::new(&[64], Some(&[0])).is_err());
    assert!(LaunchDims::new(&[64, 64], Some(&[64])).is_err());
    assert!(LaunchDims::new(&[1, 1 << 20], Some(&[1, 1])).is_err()); // grid y > 65535
}

#[test]
fn uuid_format_matches_nvidia_smi() {
    let mut b = [0u8; 16];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u8) * 17;
    }
    assert_eq!(format_uuid(b), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}
