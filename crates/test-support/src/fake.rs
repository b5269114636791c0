//! A fake backend for tests: device memory is host memory with a capacity, every action is
//! logged, and OOM is deterministic.
//!
//! ```
//! use bridge_core::convert::Registry;
//! use bridge_core::{Array, Device, MemoryType};
//! use test_support::fake::{FakeBackend, new_log};
//! let log = new_log();
//! let mut reg = Registry::new();
//! reg.register_backend(FakeBackend::new(MemoryType::Cuda, &[(Device::Cuda(0), None)], 1 << 20, log.clone()));
//! let a = Array::from_ndarray(ndarray::ArrayD::<f32>::zeros(vec![4]));
//! let d = reg.convert(a, MemoryType::Cuda, Device::Cuda(0))?;
//! assert_eq!(d.device(), Device::Cuda(0));
//! assert!(log.lock().unwrap().contains(&"upload cuda:0 16".to_owned()));
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```

use std::sync::{Arc, Mutex};

use bridge_core::array::{HostData, Storage};
use bridge_core::backend::{Backend, DeviceInfo};
use bridge_core::convert::{
    ConversionObserver, ConversionRecord, Converted, Converter, OomEvent, Topology, TransferKind,
};
use bridge_core::memory::{
    CachingPool, MemoryInfo, MemoryLimit, MemoryStats, PoolBlock, RawAllocator,
};
use bridge_core::{Array, BridgeError, Device, MemoryType, Result};

/// The shared action log: one line per allocation, free, upload, conversion, OOM, release.
pub type Log = Arc<Mutex<Vec<String>>>;

/// Allocator over host memory with a hard capacity.
pub struct FakeAlloc {
    /// The device it allocates on.
    pub device: Device,
    /// Bytes it may hand out in all.
    pub capacity: u64,
    /// Bytes handed out now.
    pub used: Mutex<u64>,
    /// Where it logs `alloc`, `free` and `oom`.
    pub log: Log,
}

impl RawAllocator for FakeAlloc {
    type Block = Vec<u8>;
    fn device(&self) -> Device {
        self.device
    }
    fn total_memory(&self) -> u64 {
        self.capacity
    }
    fn allocate(&self, bytes: usize) -> Result<Vec<u8>> {
        let mut used = self.used.lock().unwrap();
        if *used + bytes as u64 > self.capacity {
            self.log
                .lock()
                .unwrap()
                .push(format!("oom {} {bytes}", self.device));
            return Err(BridgeError::OutOfMemory {
                device: self.device,
                requested: bytes as u64,
                attempts: 1,
            });
        }
        *used += bytes as u64;
        self.log
            .lock()
            .unwrap()
            .push(format!("alloc {} {bytes}", self.device));
        Ok(vec![0; bytes])
    }
    fn free(&self, block: Vec<u8>) {
        *self.used.lock().unwrap() -= block.len() as u64;
        self.log
            .lock()
            .unwrap()
            .push(format!("free {} {}", self.device, block.len()));
    }
}

/// Fake device storage: bytes in C order inside a pool block.
pub struct FakeStorage {
    /// The pool block holding the bytes.
    pub block: PoolBlock<FakeAlloc>,
    /// Bytes of the array (the block may be larger).
    pub len: usize,
    /// The device.
    pub device: Device,
}

impl std::fmt::Debug for FakeStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FakeStorage({} bytes on {})", self.len, self.device)
    }
}

impl Storage for FakeStorage {
    fn memory_type(&self) -> MemoryType {
        self.device.memory_type()
    }
    fn device(&self) -> Device {
        self.device
    }
    fn nbytes(&self) -> usize {
        self.len
    }
}

/// A backend of one memory type whose devices are capacity-limited host memory; its converters
/// go host ↔ device (`host_kind`) and device ↔ device (peer copy or same-hardware copy).
pub struct FakeBackend {
    /// The memory type it owns.
    pub memory_type: MemoryType,
    /// Its devices.
    pub devices: Vec<DeviceInfo>,
    /// One caching pool per device.
    pub pools: Vec<CachingPool<FakeAlloc>>,
    /// Device pairs that can copy directly.
    pub peers: Vec<(Device, Device)>,
    /// The action log.
    pub log: Log,
    /// Kind used for host<->device hops.
    pub host_kind: TransferKind,
}

impl FakeBackend {
    /// `devices` of `memory_type` with `capacity` bytes each; `uuids[i]` names the hardware.
    pub fn new(
        memory_type: MemoryType,
        devices: &[(Device, Option<&str>)],
        capacity: u64,
        log: Log,
    ) -> Arc<Self> {
        let infos = devices
            .iter()
            .map(|(d, u)| DeviceInfo {
                uuid: u.map(str::to_owned),
                total_memory: Some(capacity),
                ..DeviceInfo::new(*d, format!("fake {d}"))
            })
            .collect();
        let pools = devices
            .iter()
            .map(|(d, _)| {
                CachingPool::new(FakeAlloc {
                    device: *d,
                    capacity,
                    used: Mutex::new(0),
                    log: log.clone(),
                })
            })
            .collect();
        let host_kind = if memory_type == MemoryType::OpenCl {
            TransferKind::HostCopy
        } else {
            TransferKind::PinnedStaged
        };
        Arc::new(FakeBackend {
            memory_type,
            devices: infos,
            pools,
            peers: Vec::new(),
            log,
            host_kind,
        })
    }

    /// The same backend with `peers` as its peer-to-peer pairs (the `Arc` must be unique).
    pub fn with_peers(self: Arc<Self>, peers: &[(Device, Device)]) -> Arc<Self> {
        let mut b = Arc::try_unwrap(self).ok().expect("unique");
        b.peers = peers.to_vec();
        Arc::new(b)
    }

    /// The pool of `device` ([`BridgeError::UnknownDevice`] when it has none).
    pub fn pool(&self, device: Device) -> Result<&CachingPool<FakeAlloc>> {
        self.pools
            .iter()
            .find(|p| p.device() == device)
            .ok_or(BridgeError::UnknownDevice {
                device,
                available: "fake".into(),
            })
    }

    /// Upload host data to `device`.
    pub fn upload(&self, data: &HostData, device: Device) -> Result<Array> {
        let bytes = data.to_c_bytes();
        let mut block = self.pool(device)?.allocate(bytes.len())?;
        block[..bytes.len()].copy_from_slice(&bytes);
        self.log
            .lock()
            .unwrap()
            .push(format!("upload {device} {}", bytes.len()));
        Array::from_storage(
            Box::new(FakeStorage {
                block,
                len: bytes.len(),
                device,
            }),
            data.shape().to_vec(),
            data.dtype(),
        )
    }
}

impl MemoryInfo for FakeBackend {
    fn memory_stats(&self, device: Device) -> Result<MemoryStats> {
        let p = self.pool(device)?;
        let s = p.stats();
        let used = *p.allocator().used.lock().unwrap();
        Ok(MemoryStats::from_pool(
            p.allocator().capacity,
            Some(p.allocator().capacity - used),
            &s,
        ))
    }
    fn set_memory_limit(&self, device: Device, limit: Option<MemoryLimit>) -> Result<()> {
        self.pool(device)?.set_limit(limit);
        Ok(())
    }
}

struct FakeConverter {
    backend: Arc<FakeBackend>,
    src: MemoryType,
    dst: MemoryType,
}

impl Converter for FakeConverter {
    fn source(&self) -> MemoryType {
        self.src
    }
    fn target(&self) -> MemoryType {
        self.dst
    }
    fn edge(&self, src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
        let mine = self.backend.memory_type;
        match (self.src, self.dst) {
            (MemoryType::Host, d) if d == mine => Some(self.backend.host_kind),
            (s, MemoryType::Host) if s == mine => Some(self.backend.host_kind),
            (s, d) if s == mine && d == mine => {
                if topology.can_access_peer(src, dst) {
                    Some(TransferKind::PeerCopy)
                } else if topology.same_physical(src, dst) {
                    Some(TransferKind::DeviceCopy)
                } else {
                    None
                }
            }
            _ => None,
        }
    }
    fn convert(&self, array: Array, dst: Device, kind: TransferKind) -> Result<Converted> {
        self.hop(&array, dst, kind, "convert")
    }
    fn copy(&self, array: &Array, dst: Device, kind: TransferKind) -> Option<Result<Converted>> {
        Some(self.hop(array, dst, kind, "copy"))
    }
}

impl FakeConverter {
    /// One hop (a copy: the fake's memory is host memory), logged as `what`.
    fn hop(&self, array: &Array, dst: Device, kind: TransferKind, what: &str) -> Result<Converted> {
        self.backend
            .log
            .lock()
            .unwrap()
            .push(format!("{what} {} -> {dst} {kind}", array.device()));
        let nbytes = array.nbytes() as u64;
        let (shape, dtype) = (array.shape().to_vec(), array.dtype());
        let host = if array.memory_type() == MemoryType::Host {
            array.host()?.clone()
        } else {
            let st = array
                .storage::<FakeStorage>()
                .ok_or_else(|| BridgeError::Unsupported("not fake".into()))?;
            HostData::from_c_bytes(dtype, &shape, &st.block[..st.len])?
        };
        let out = if dst == Device::Cpu {
            Array::from_host(host)
        } else {
            self.backend.upload(&host, dst)?
        };
        Ok(Converted {
            array: out,
            bytes_moved: nbytes,
        })
    }
}

impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn memory_type(&self) -> MemoryType {
        self.memory_type
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self.devices.clone())
    }
    fn can_access_peer(&self, a: Device, b: Device) -> bool {
        self.peers.contains(&(a, b))
    }
    fn release_pool(&self, device: Device) -> u64 {
        let n = self.pool(device).map(|p| p.release()).unwrap_or(0);
        self.log
            .lock()
            .unwrap()
            .push(format!("release {device} {n}"));
        n
    }
    fn converters(&self) -> Vec<Arc<dyn Converter>> {
        let me = Arc::new(FakeBackend {
            memory_type: self.memory_type,
            devices: self.devices.clone(),
            pools: self.pools.clone(),
            peers: self.peers.clone(),
            log: self.log.clone(),
            host_kind: self.host_kind,
        });
        let mt = self.memory_type;
        [(MemoryType::Host, mt), (mt, MemoryType::Host), (mt, mt)]
            .into_iter()
            .map(|(src, dst)| {
                Arc::new(FakeConverter {
                    backend: me.clone(),
                    src,
                    dst,
                }) as Arc<dyn Converter>
            })
            .collect()
    }
}

/// A zero-copy converter between Torch-CUDA and CUDA on the same hardware (pointer exchange).
/// It plans only: `convert` is an error.
pub struct FakeZeroCopy {
    /// Source memory type.
    pub src: MemoryType,
    /// Target memory type.
    pub dst: MemoryType,
}

impl Converter for FakeZeroCopy {
    fn source(&self) -> MemoryType {
        self.src
    }
    fn target(&self) -> MemoryType {
        self.dst
    }
    fn edge(&self, src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
        topology
            .same_physical(src, dst)
            .then_some(TransferKind::ZeroCopy)
    }
    fn convert(&self, _array: Array, _dst: Device, _kind: TransferKind) -> Result<Converted> {
        Err(BridgeError::Unsupported(
            "fake zero-copy is for planning only".into(),
        ))
    }
}

/// An observer that keeps everything it hears.
#[derive(Default)]
pub struct Recorder {
    /// Every conversion record, in order.
    pub records: Mutex<Vec<ConversionRecord>>,
    /// Every OOM event, in order.
    pub events: Mutex<Vec<OomEvent>>,
}

impl ConversionObserver for Recorder {
    fn on_conversion(&self, record: &ConversionRecord) {
        self.records.lock().unwrap().push(record.clone());
    }
    fn on_oom_event(&self, event: &OomEvent) {
        self.events.lock().unwrap().push(event.clone());
    }
}

/// An empty [`Log`].
pub fn new_log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}
