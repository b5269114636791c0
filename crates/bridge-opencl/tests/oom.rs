#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Out of memory on PoCL, made deterministic by a per-device pool limit: typed errors, pool
//! release + retry, and `SplitBatch`.

mod common;

use std::sync::Mutex;

use bridge_core::convert::{ConversionObserver, ConversionRecord, OomEvent, Registry};
use bridge_core::memory::{MemoryInfo, MemoryLimit};
use bridge_core::oom::{
    OnExhausted, PoolReleaser, ReleaseScope, RetryPolicy, run_batched, with_oom_retry,
};
use bridge_core::{Array, BridgeError, Device, MemoryType};
use bridge_opencl::OpenClBackend;
use ndarray::ArrayD;

const MIB: usize = 1 << 20;

/// Limit the pool of `dev` to `bytes` and at most 1 KiB more (as a fraction of global memory,
/// aimed half a KiB above: the fraction times the device's total can round to a few bytes
/// less than `bytes`, and then `bytes` of buffers no longer fit).
fn limit_to(backend: &OpenClBackend, dev: Device, bytes: usize) -> u64 {
    let total = backend.memory_stats(dev).unwrap().total;
    let limit = MemoryLimit::fraction((bytes as f64 + 512.0) / total as f64).unwrap();
    backend.set_memory_limit(dev, Some(limit)).unwrap();
    let l = backend.pool_stats(dev).unwrap().limit.unwrap();
    assert!(
        l >= bytes as u64 && l - bytes as u64 <= 1024,
        "limit {l} vs {bytes}"
    );
    l
}

#[test]
fn limit_gives_out_of_memory_and_release_frees_the_cache() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    limit_to(&backend, dev, 4 * MIB);
    // Larger than the limit outright.
    let e = backend.alloc(dev, 5 * MIB).unwrap_err();
    assert!(
        matches!(e, BridgeError::OutOfMemory { device, requested, .. } if device == dev && requested == 5 * MIB as u64),
        "{e}"
    );
    // Fits alone, not next to a live buffer.
    let live = backend.alloc(dev, 3 * MIB).unwrap();
    let e = backend.alloc(dev, 2 * MIB).unwrap_err();
    assert!(e.is_oom(), "{e}");
    drop(live);
    // Dropped memory is cached by the pool, visible in the stats, and released on request.
    let s = backend.memory_stats(dev).unwrap();
    assert_eq!((s.pool_reserved, s.pool_in_use), (3 * MIB as u64, 0));
    let reg = common::registry(&backend);
    assert_eq!(reg.release_pools(dev), 3 * MIB as u64);
    assert_eq!(backend.memory_stats(dev).unwrap().pool_reserved, 0);
    // Over the device's max allocation is OOM too (no limit needed).
    backend.set_memory_limit(dev, None).unwrap();
    let max = backend
        .device_info(dev)
        .unwrap()
        .capabilities
        .max_alloc
        .unwrap() as usize;
    let e = backend.alloc(dev, max + 1).unwrap_err();
    assert!(e.is_oom(), "{e}");
}

/// Releases the registry's pools, after first dropping an array the application was caching
/// (as a pipeline stage that gives back its scratch would).
struct DropThenRelease<'a> {
    reg: &'a Registry,
    held: Mutex<Option<Array>>,
    released: Mutex<Vec<u64>>,
}

impl PoolReleaser for DropThenRelease<'_> {
    fn release(&self, device: Device, scope: &ReleaseScope) -> u64 {
        self.held.lock().unwrap().take();
        let n = self.reg.release(device, scope);
        self.released.lock().unwrap().push(n);
        n
    }
}

#[test]
fn oom_retry_releases_the_pool_and_succeeds() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    limit_to(&backend, dev, 4 * MIB);
    let reg = common::registry(&backend);
    let held = reg
        .convert(
            Array::from_ndarray(ArrayD::<u8>::zeros(vec![2 * MIB])),
            MemoryType::OpenCl,
            dev,
        )
        .unwrap();
    let releaser = DropThenRelease {
        reg: &reg,
        held: Mutex::new(Some(held)),
        released: Mutex::new(Vec::new()),
    };
    let data = ArrayD::<u8>::from_shape_fn(vec![3 * MIB], |i| (i[0] % 253) as u8);
    let mut attempts = 0;
    let out = with_oom_retry(&RetryPolicy::default(), dev, &releaser, || {
        attempts += 1;
        reg.convert(Array::from_ndarray(data.clone()), MemoryType::OpenCl, dev)
    })
    .unwrap();
    assert_eq!(
        attempts, 2,
        "first attempt must hit the limit, the retry must succeed"
    );
    // The release gave back the dropped array's 2 MiB that sat in the pool's cache.
    assert_eq!(
        releaser.released.lock().unwrap().as_slice(),
        &[2 * MIB as u64]
    );
    let back = reg.convert(out, MemoryType::Host, Device::Cpu).unwrap();
    assert_eq!(back.into_ndarray::<u8>().unwrap(), data);

    // With nothing to release the retries run out and the error says how many were made.
    let hog = backend.alloc(dev, 3 * MIB).unwrap();
    let e = with_oom_retry(&RetryPolicy::default(), dev, &reg, || {
        backend.alloc(dev, 2 * MIB)
    })
    .unwrap_err();
    assert!(
        matches!(e, BridgeError::OutOfMemory { attempts: 3, .. }),
        "{e}"
    );
    drop(hog);
}

#[derive(Default)]
struct Events(Mutex<Vec<OomEvent>>);

impl ConversionObserver for Events {
    fn on_conversion(&self, _record: &ConversionRecord) {}
    fn on_oom_event(&self, event: &OomEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

#[test]
fn split_batch_completes_in_halves() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    limit_to(&backend, dev, 4 * MIB);
    let reg = common::registry(&backend);
    let events = std::sync::Arc::new(Events::default());
    reg.set_observer(Some(events.clone()));
    // 8 items of 1 MiB: the whole batch (8 MiB) cannot fit under 4 MiB, halves of 4 MiB can.
    let items: Vec<ArrayD<u8>> = (0..8u8).map(|i| ArrayD::from_elem(vec![MIB], i)).collect();
    let batches = Mutex::new(Vec::new());
    let mut device_op = |range: std::ops::Range<usize>| -> bridge_core::Result<Vec<u8>> {
        batches.lock().unwrap().push(range.clone());
        let bufs = range
            .clone()
            .map(|i| backend.upload_slice(dev, items[i].as_slice().unwrap()))
            .collect::<bridge_core::Result<Vec<_>>>()?;
        // "Compute": read the first byte of each item back.
        bufs.iter()
            .map(|b| {
                let mut one = [0u8; 1];
                b.read(0, &mut one)?;
                Ok(one[0])
            })
            .collect()
    };
    let policy = RetryPolicy {
        on_exhausted: OnExhausted::SplitBatch,
        ..RetryPolicy::default()
    };
    let out = run_batched(&policy, dev, &reg, items.len(), &mut device_op, None).unwrap();
    assert_eq!(out, (0..8u8).collect::<Vec<_>>());
    let batches = batches.lock().unwrap().clone();
    assert_eq!(batches.first(), Some(&(0..8)));
    assert!(
        batches.contains(&(0..4)) && batches.contains(&(4..8)),
        "{batches:?}"
    );
    assert!(
        !batches.iter().any(|r| r.len() < 4),
        "halves suffice: {batches:?}"
    );
    let ev = events.0.lock().unwrap();
    assert!(
        ev.iter()
            .any(|e| matches!(e, OomEvent::SplitBatch { len: 8, .. })),
        "{ev:?}"
    );
    assert!(ev.iter().any(|e| matches!(e, OomEvent::Retry { .. })));
    drop(ev);

    // With `Fail` the same job returns the OOM error.
    let fail = RetryPolicy::default();
    let e = run_batched(&fail, dev, &reg, items.len(), &mut device_op, None).unwrap_err();
    assert!(e.is_oom(), "{e}");
}
