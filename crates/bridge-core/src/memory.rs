//! Memory statistics, memory limits, and a caching pool that every device backend shares.
//!
//! [`CachingPool`] is generic over a [`RawAllocator`] (a CUDA or OpenCL allocator, or a fake one
//! in tests). It caches freed blocks for reuse, enforces a memory limit (a fraction of the
//! device's total memory), reports [`PoolStats`], and can [`release`](CachingPool::release) its
//! cache, which is what OOM retry asks of every backend before trying again.
//!
//! ```
//! use bridge_core::memory::{CachingPool, MemoryLimit, RawAllocator};
//! use bridge_core::{BridgeError, Device, Result};
//!
//! struct Heap;
//! impl RawAllocator for Heap {
//!     type Block = Vec<u8>;
//!     fn device(&self) -> Device { Device::Cpu }
//!     fn total_memory(&self) -> u64 { 1 << 20 }
//!     fn allocate(&self, bytes: usize) -> Result<Vec<u8>> { Ok(vec![0; bytes]) }
//!     fn free(&self, _block: Vec<u8>) {}
//! }
//!
//! let pool = CachingPool::new(Heap);
//! pool.set_limit(Some(MemoryLimit::fraction(0.5)?));       // 512 KiB of 1 MiB
//! let a = pool.allocate(100_000)?;
//! assert!(matches!(pool.allocate(600_000), Err(BridgeError::OutOfMemory { .. })));
//! drop(a);                                                   // back into the cache
//! assert_eq!(pool.stats().in_use, 0);
//! assert!(pool.release() > 0);                               // cache emptied
//! # Ok::<(), BridgeError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::Device;
use crate::error::{BridgeError, Result};

/// Memory figures for one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct MemoryStats {
    /// Total device memory in bytes.
    pub total: u64,
    /// Free device memory in bytes, where the backend can tell (OpenCL cannot).
    pub free: Option<u64>,
    /// Bytes the backend's pool holds from the device (in use + cached).
    pub pool_reserved: u64,
    /// Bytes of the pool handed out to live arrays.
    pub pool_in_use: u64,
    /// Bytes the pool keeps cached for reuse (`pool_reserved − pool_in_use`).
    pub pool_cached: u64,
    /// The most the pool has held at once since its cache was last released or its limit set
    /// (0 where the backend keeps no pool figures).
    pub pool_peak: u64,
    /// The pool's limit in bytes, if one is set.
    pub pool_limit: Option<u64>,
    /// Allocations the pool made on the device (not served from its cache).
    pub allocations: u64,
    /// Allocations served from the pool's cache.
    pub cache_hits: u64,
}

impl MemoryStats {
    /// The figures of a device of `total` bytes (`free` where the driver says) whose memory
    /// the pool `p` manages.
    pub fn from_pool(total: u64, free: Option<u64>, p: &PoolStats) -> MemoryStats {
        MemoryStats {
            total,
            free,
            pool_reserved: p.reserved,
            pool_in_use: p.in_use,
            pool_cached: p.cached,
            pool_peak: p.peak_reserved,
            pool_limit: p.limit,
            allocations: p.device_allocs,
            cache_hits: p.cache_hits,
        }
    }

    /// Bytes a new allocation could take now: the device's free memory (where the driver does
    /// not say, the total less what the pool holds) plus the pool's cached blocks, within the
    /// pool's limit less what it has handed out.
    pub fn available(&self) -> u64 {
        let device = self
            .free
            .unwrap_or_else(|| self.total.saturating_sub(self.pool_reserved));
        let avail = device.saturating_add(self.pool_cached);
        match self.pool_limit {
            Some(limit) => avail.min(limit.saturating_sub(self.pool_in_use)),
            None => avail,
        }
    }
}

/// A memory limit as a fraction of a device's total memory, in `(0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct MemoryLimit(f64);

impl MemoryLimit {
    /// A limit of `fraction` of total memory. Errors unless `0 < fraction <= 1`.
    pub fn fraction(fraction: f64) -> Result<MemoryLimit> {
        if fraction.is_finite() && fraction > 0.0 && fraction <= 1.0 {
            Ok(MemoryLimit(fraction))
        } else {
            Err(BridgeError::invalid_argument(
                "memory limit",
                format!("fraction must be in (0, 1], got {fraction}"),
            ))
        }
    }

    /// The fraction.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The limit in bytes for a device of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        (total as f64 * self.0).floor() as u64
    }
}

/// Memory statistics and limits, implemented by every device backend.
pub trait MemoryInfo {
    /// Figures for `device`: total and free from the driver where it can say, plus pool figures.
    fn memory_stats(&self, device: Device) -> Result<MemoryStats>;
    /// Limit what the backend's pool may hold on `device` (`None` removes the limit).
    fn set_memory_limit(&self, device: Device, limit: Option<MemoryLimit>) -> Result<()>;
}

/// A device allocator the pool draws from. `allocate` must map the native out-of-memory error
/// (and only it) to [`BridgeError::OutOfMemory`].
pub trait RawAllocator: Send + Sync + 'static {
    /// One allocation.
    type Block: Send + 'static;
    /// The device allocations come from.
    fn device(&self) -> Device;
    /// Total memory of the device in bytes (the base of [`MemoryLimit`]).
    fn total_memory(&self) -> u64;
    /// Allocate `bytes` (never zero: the pool rounds up).
    fn allocate(&self, bytes: usize) -> Result<Self::Block>;
    /// Return an allocation to the device.
    fn free(&self, block: Self::Block);
}

/// Pool figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct PoolStats {
    /// Bytes held from the device (in use + cached).
    pub reserved: u64,
    /// Bytes handed out.
    pub in_use: u64,
    /// Bytes cached for reuse.
    pub cached: u64,
    /// The enforced limit in bytes, if any.
    pub limit: Option<u64>,
    /// Allocations served from the cache.
    pub cache_hits: u64,
    /// Allocations that went to the device.
    pub device_allocs: u64,
    /// The most `reserved` has been since the pool was made, its cache last released
    /// ([`CachingPool::release`]) or its limit last set.
    pub peak_reserved: u64,
}

struct State<B> {
    free: BTreeMap<usize, Vec<B>>,
    stats: PoolStats,
}

/// Blocks taken out of the cache, to be freed outside the lock.
struct Cached<B> {
    blocks: Vec<B>,
    bytes: u64,
}

impl<B> Default for Cached<B> {
    fn default() -> Self {
        Cached {
            blocks: Vec::new(),
            bytes: 0,
        }
    }
}

struct Inner<A: RawAllocator> {
    alloc: A,
    state: Mutex<State<A::Block>>,
}

impl<A: RawAllocator> Inner<A> {
    fn lock(&self) -> MutexGuard<'_, State<A::Block>> {
        // A panic while holding the lock cannot leave the counters half-updated in a way that
        // matters more than losing the pool, so recover from poisoning.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take every cached block out of the pool's books (the caller frees them with
    /// [`Inner::free_all`] after dropping the lock: device frees never run under the mutex).
    fn take_cached(&self, st: &mut State<A::Block>) -> Cached<A::Block> {
        let mut blocks = Vec::new();
        let mut bytes = 0u64;
        for (size, list) in std::mem::take(&mut st.free) {
            bytes += (size * list.len()) as u64;
            blocks.extend(list);
        }
        st.stats.reserved -= bytes;
        st.stats.cached -= bytes;
        Cached { blocks, bytes }
    }

    fn free_all(&self, cached: Cached<A::Block>) {
        for b in cached.blocks {
            self.alloc.free(b);
        }
    }

    /// Give back a reservation made for a device allocation that failed.
    fn unreserve(&self, size: usize) {
        let mut st = self.lock();
        st.stats.reserved -= size as u64;
        st.stats.in_use -= size as u64;
    }
}

/// A caching allocator with a memory limit. Cheap to clone (shared).
pub struct CachingPool<A: RawAllocator> {
    inner: Arc<Inner<A>>,
}

impl<A: RawAllocator> Clone for CachingPool<A> {
    fn clone(&self) -> Self {
        CachingPool {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: RawAllocator> fmt::Debug for CachingPool<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingPool")
            .field("device", &self.inner.alloc.device())
            .field("stats", &self.stats())
            .finish()
    }
}

/// Sizes are rounded up to this granularity so that blocks are reusable across nearby sizes.
const GRANULE: usize = 512;

fn round_size(bytes: usize) -> usize {
    bytes.max(1).div_ceil(GRANULE).saturating_mul(GRANULE)
}

impl<A: RawAllocator> CachingPool<A> {
    /// A pool over `alloc` with no limit.
    pub fn new(alloc: A) -> Self {
        CachingPool {
            inner: Arc::new(Inner {
                alloc,
                state: Mutex::new(State {
                    free: BTreeMap::new(),
                    stats: PoolStats::default(),
                }),
            }),
        }
    }

    /// The underlying allocator.
    pub fn allocator(&self) -> &A {
        &self.inner.alloc
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.inner.alloc.device()
    }

    /// Set or clear the limit. Cached blocks above a new, lower limit are released.
    pub fn set_limit(&self, limit: Option<MemoryLimit>) {
        let mut st = self.inner.lock();
        st.stats.limit = limit.map(|l| l.bytes(self.inner.alloc.total_memory()));
        if let Some(l) = st.stats.limit
            && st.stats.reserved > l
        {
            let cached = self.inner.take_cached(&mut st);
            st.stats.peak_reserved = st.stats.reserved;
            drop(st);
            self.inner.free_all(cached);
            return;
        }
        st.stats.peak_reserved = st.stats.reserved;
    }

    /// Current figures.
    pub fn stats(&self) -> PoolStats {
        self.inner.lock().stats
    }

    /// Free every cached (unused) block; returns the bytes given back to the device.
    pub fn release(&self) -> u64 {
        let cached = {
            let mut st = self.inner.lock();
            let cached = self.inner.take_cached(&mut st);
            st.stats.peak_reserved = st.stats.reserved;
            cached
        };
        let bytes = cached.bytes;
        self.inner.free_all(cached);
        bytes
    }

    /// Allocate at least `bytes`. Reuses a cached block of up to twice the rounded size; on a
    /// limit breach or a device OOM, releases the cache and tries once more before returning
    /// [`BridgeError::OutOfMemory`].
    ///
    /// The pool's mutex is never held across the device's allocate or free calls (which can
    /// take milliseconds and synchronise the device): the size is reserved against the limit
    /// under the lock, the device call runs without it, and a failed call gives the
    /// reservation back. Other threads' cache hits, frees and statistics proceed meanwhile.
    pub fn allocate(&self, bytes: usize) -> Result<PoolBlock<A>> {
        let size = round_size(bytes);
        let oom = |attempts| BridgeError::OutOfMemory {
            device: self.device(),
            requested: bytes as u64,
            attempts,
        };
        let mut st = self.inner.lock();
        // Best fit from the cache.
        let hit = st
            .free
            .range_mut(size..=size.saturating_mul(2))
            .find(|(_, v)| !v.is_empty())
            .and_then(|(&s, v)| v.pop().map(|b| (s, b)));
        if let Some((s, block)) = hit {
            st.free.retain(|_, v| !v.is_empty());
            st.stats.cached -= s as u64;
            st.stats.in_use += s as u64;
            st.stats.cache_hits += 1;
            return Ok(self.wrap(block, s));
        }
        let mut to_free = Cached::default();
        if let Some(limit) = st.stats.limit {
            if size as u64 > limit {
                return Err(oom(1));
            }
            if st.stats.reserved + size as u64 > limit {
                to_free = self.inner.take_cached(&mut st);
                if st.stats.reserved + size as u64 > limit {
                    drop(st);
                    self.inner.free_all(to_free);
                    return Err(oom(1));
                }
            }
        }
        // Reserve now, so concurrent allocations see this one against the limit.
        st.stats.reserved += size as u64;
        st.stats.in_use += size as u64;
        st.stats.peak_reserved = st.stats.peak_reserved.max(st.stats.reserved);
        drop(st);
        self.inner.free_all(to_free);
        let block = match self.inner.alloc.allocate(size) {
            Ok(b) => b,
            Err(e) if e.is_oom() => {
                let cached = {
                    let mut st = self.inner.lock();
                    self.inner.take_cached(&mut st)
                };
                if cached.blocks.is_empty() {
                    self.inner.unreserve(size);
                    return Err(oom(1));
                }
                self.inner.free_all(cached);
                match self.inner.alloc.allocate(size) {
                    Ok(b) => b,
                    Err(e) => {
                        self.inner.unreserve(size);
                        return Err(if e.is_oom() { oom(2) } else { e });
                    }
                }
            }
            Err(e) => {
                self.inner.unreserve(size);
                return Err(e);
            }
        };
        self.inner.lock().stats.device_allocs += 1;
        Ok(self.wrap(block, size))
    }

    fn wrap(&self, block: A::Block, size: usize) -> PoolBlock<A> {
        PoolBlock {
            block: Some(block),
            size,
            pool: Arc::clone(&self.inner),
        }
    }
}

/// A block borrowed from a [`CachingPool`]; returns to the pool's cache when dropped.
pub struct PoolBlock<A: RawAllocator> {
    block: Option<A::Block>,
    size: usize,
    pool: Arc<Inner<A>>,
}

impl<A: RawAllocator> PoolBlock<A> {
    /// The size of the block in bytes (the request rounded up).
    pub fn size(&self) -> usize {
        self.size
    }
}

impl<A: RawAllocator> fmt::Debug for PoolBlock<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PoolBlock({} bytes on {})",
            self.size,
            self.pool.alloc.device()
        )
    }
}

impl<A: RawAllocator> Deref for PoolBlock<A> {
    type Target = A::Block;
    fn deref(&self) -> &A::Block {
        // The block is only taken in `drop`.
        match &self.block {
            Some(b) => b,
            None => unreachable!("PoolBlock used after drop"),
        }
    }
}

impl<A: RawAllocator> DerefMut for PoolBlock<A> {
    fn deref_mut(&mut self) -> &mut A::Block {
        match &mut self.block {
            Some(b) => b,
            None => unreachable!("PoolBlock used after drop"),
        }
    }
}

impl<A: RawAllocator> Drop for PoolBlock<A> {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            let mut st = self.pool.lock();
            st.stats.in_use -= self.size as u64;
            let over_limit = st.stats.limit.is_some_and(|l| st.stats.reserved > l);
            if over_limit {
                st.stats.reserved -= self.size as u64;
                drop(st);
                self.pool.alloc.free(b);
            } else {
                st.stats.cached += self.size as u64;
                st.free.entry(self.size).or_default().push(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// What a new allocation could take: the driver's free memory (or the total less the
    /// pool's) plus the pool's cache, within its limit.
    #[test]
    fn available_counts_free_cache_and_limit() {
        let p = PoolStats {
            reserved: 300,
            in_use: 200,
            cached: 100,
            ..PoolStats::default()
        };
        assert_eq!(MemoryStats::from_pool(1000, Some(500), &p).available(), 600);
        assert_eq!(MemoryStats::from_pool(1000, None, &p).available(), 800);
        let limited = PoolStats {
            limit: Some(450),
            ..p
        };
        assert_eq!(
            MemoryStats::from_pool(1000, None, &limited).available(),
            250
        );
        let over = PoolStats {
            limit: Some(100),
            ..p
        };
        assert_eq!(
            MemoryStats::from_pool(1000, Some(500), &over).available(),
            0
        );
        assert_eq!(
            MemoryStats::from_pool(100, None, &PoolStats { reserved: 300, ..p }).available(),
            100
        );
    }

    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// An allocator whose `allocate` blocks until the test lets it go.
    struct Gate {
        entered: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl RawAllocator for Gate {
        type Block = usize;
        fn device(&self) -> Device {
            Device::Cpu
        }
        fn total_memory(&self) -> u64 {
            1 << 30
        }
        fn allocate(&self, bytes: usize) -> Result<usize> {
            if bytes > 4096 {
                let _ = self.entered.lock().unwrap().send(());
                let _ = self.release.lock().unwrap().recv();
            }
            Ok(bytes)
        }
        fn free(&self, _block: usize) {}
    }

    #[test]
    fn device_allocations_do_not_hold_the_pool_lock() {
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let pool = CachingPool::new(Gate {
            entered: Mutex::new(entered_tx),
            release: Mutex::new(release_rx),
        });
        // a small block cached for the second thread
        drop(pool.allocate(1024).unwrap());
        let slow = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.allocate(1 << 20).map(|b| b.size()))
        };
        entered_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the slow allocation started");
        // While the device call of the other thread is in flight: statistics, a cache hit and
        // a release all complete (they would deadlock if the lock were held).
        let (done_tx, done_rx) = mpsc::channel();
        {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let st = pool.stats();
                let hit = pool.allocate(1000).map(|b| b.size());
                let released = pool.release();
                let _ = done_tx.send((st, hit, released));
            });
        }
        let (st, hit, released) = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("pool operations finish while a device allocation is in flight");
        // the in-flight allocation is already counted against the pool
        assert_eq!(st.in_use, 1 << 20);
        assert_eq!(st.reserved, (1 << 20) + 1024);
        assert_eq!(hit.unwrap(), 1024);
        assert_eq!(
            released, 1024,
            "the hit block came back to the cache and was released"
        );
        release_tx.send(()).unwrap();
        assert_eq!(slow.join().unwrap().unwrap(), 1 << 20);
        let st = pool.stats();
        assert_eq!((st.in_use, st.device_allocs, st.cache_hits), (0, 2, 1));
        assert_eq!(st.reserved, 1 << 20);
    }

    struct Failing;
    impl RawAllocator for Failing {
        type Block = usize;
        fn device(&self) -> Device {
            Device::Cpu
        }
        fn total_memory(&self) -> u64 {
            1 << 20
        }
        fn allocate(&self, bytes: usize) -> Result<usize> {
            Err(BridgeError::OutOfMemory {
                device: Device::Cpu,
                requested: bytes as u64,
                attempts: 1,
            })
        }
        fn free(&self, _block: usize) {}
    }

    #[test]
    fn a_failed_device_allocation_gives_its_reservation_back() {
        let pool = CachingPool::new(Failing);
        assert!(pool.allocate(4096).unwrap_err().is_oom());
        let st = pool.stats();
        assert_eq!((st.reserved, st.in_use, st.device_allocs), (0, 0, 0));
    }
}
