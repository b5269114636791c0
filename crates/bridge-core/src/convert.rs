//! The conversion registry and its route planner.
//!
//! Backends register [`Converter`]s keyed by (source memory type, target memory type). The
//! planner ([`plan_route`], also [`Registry::plan`]) is a **pure function** of the registry's
//! snapshot ([`Topology`] plus the converters' declared edges): it touches no device. It checks the
//! request (memory type valid on the device, backend available, device ordinal known), then finds
//! the cheapest chain of hops — in place, zero-copy view, same-device copy, peer copy, pinned-staged
//! copy, or plain host copy — going through several converters when there is no direct one.
//! [`Registry::convert`] executes the plan and reports a [`ConversionRecord`] to the observer,
//! if one is installed (no clock is read when none is).
//!
//! # Completion contract
//! A converter's `convert` returns only when the destination data is complete for any later
//! consumer (host code, any stream or queue of the destination device). Backends that offer
//! non-blocking transfers expose them through their own APIs with an explicit ready token.
//!
//! ```
//! use bridge_core::convert::{Registry, TransferKind};
//! use bridge_core::{Array, Device, MemoryType};
//! let reg = Registry::new();
//! // Host to host is in place.
//! let route = reg.plan(MemoryType::Host, Device::Cpu, MemoryType::Host, Device::Cpu)?;
//! assert_eq!(route.kind(), TransferKind::InPlace);
//! // An ndarray cannot live on a GPU: rejected before anything moves.
//! assert!(reg.plan(MemoryType::Host, Device::Cpu, MemoryType::Host, Device::Cuda(0)).is_err());
//! let a = reg.convert(Array::from_ndarray(ndarray::ArrayD::<u8>::zeros(vec![4])), MemoryType::Host, Device::Cpu)?;
//! assert_eq!(a.shape(), &[4]);
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::array::Array;
use crate::backend::{Backend, BackendReport, DeviceInfo};
use crate::device::{Device, MemoryType};
use crate::error::{BridgeError, Result};
use crate::memory::MemoryStats;

/// How one hop moves data, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum TransferKind {
    /// Nothing happens: source and destination are the same.
    InPlace,
    /// The destination borrows the source's memory (pointer exchange or view).
    ZeroCopy,
    /// A copy inside one physical device.
    DeviceCopy,
    /// A direct copy between two devices (peer-to-peer).
    PeerCopy,
    /// A copy staged through pinned (page-locked) host memory, chunked.
    PinnedStaged,
    /// A copy through plain (pageable) host memory.
    HostCopy,
}

impl TransferKind {
    /// The planner's cost of one hop of this kind.
    pub fn cost(self) -> u32 {
        match self {
            TransferKind::InPlace => 0,
            TransferKind::ZeroCopy => 1,
            TransferKind::DeviceCopy => 4,
            TransferKind::PeerCopy => 8,
            TransferKind::PinnedStaged => 16,
            TransferKind::HostCopy => 24,
        }
    }

    /// True when no bytes are moved.
    pub fn is_free(self) -> bool {
        matches!(self, TransferKind::InPlace | TransferKind::ZeroCopy)
    }

    /// Short lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            TransferKind::InPlace => "in-place",
            TransferKind::ZeroCopy => "zero-copy",
            TransferKind::DeviceCopy => "device-copy",
            TransferKind::PeerCopy => "peer-copy",
            TransferKind::PinnedStaged => "pinned-staged",
            TransferKind::HostCopy => "host-copy",
        }
    }
}

impl fmt::Display for TransferKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A (memory type, device) pair: a node of the route graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Endpoint {
    /// Memory type.
    pub memory_type: MemoryType,
    /// Device.
    pub device: Device,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.memory_type, self.device)
    }
}

/// One hop of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    /// Where the hop starts.
    pub from: Endpoint,
    /// Where it ends.
    pub to: Endpoint,
    /// How it moves data.
    pub kind: TransferKind,
}

/// A planned conversion: zero or more hops.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Route {
    /// Source.
    pub from: Endpoint,
    /// Destination.
    pub to: Endpoint,
    /// The hops, in order (empty for an in-place route).
    pub steps: Vec<Step>,
}

impl Route {
    /// Sum of the hops' costs.
    pub fn cost(&self) -> u32 {
        self.steps.iter().map(|s| s.kind.cost()).sum()
    }

    /// The most expensive hop's kind ([`TransferKind::InPlace`] for an empty route).
    pub fn kind(&self) -> TransferKind {
        self.steps
            .iter()
            .map(|s| s.kind)
            .max()
            .unwrap_or(TransferKind::InPlace)
    }

    /// True when no hop moves bytes.
    pub fn is_zero_copy(&self) -> bool {
        self.steps.iter().all(|s| s.kind.is_free())
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.from)?;
        if self.steps.is_empty() {
            return write!(f, " (in place)");
        }
        for s in &self.steps {
            write!(f, " -[{}]-> {}", s.kind, s.to)?;
        }
        Ok(())
    }
}

/// What the registry knows about the devices, snapshotted when backends register. The planner
/// reads only this, never a device.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Topology {
    devices: BTreeMap<Device, Option<String>>,
    peers: BTreeSet<(Device, Device)>,
    unavailable: BTreeMap<MemoryType, String>,
}

impl Topology {
    /// A topology with only the host CPU.
    pub fn host_only() -> Self {
        let mut t = Topology::default();
        t.devices.insert(Device::Cpu, None);
        t
    }

    /// Add a device with an optional physical identifier (UUID).
    pub fn add_device(&mut self, device: Device, uuid: Option<String>) -> &mut Self {
        self.unavailable.remove(&device.memory_type());
        self.devices.insert(device, uuid);
        self
    }

    /// Declare that `a` can copy to `b` directly.
    pub fn add_peer(&mut self, a: Device, b: Device) -> &mut Self {
        self.peers.insert((a, b));
        self
    }

    /// Mark a memory type's backend as unavailable, with the reason.
    pub fn set_unavailable(
        &mut self,
        memory_type: MemoryType,
        reason: impl Into<String>,
    ) -> &mut Self {
        self.unavailable.insert(memory_type, reason.into());
        self
    }

    /// Whether `device` is known.
    pub fn has_device(&self, device: Device) -> bool {
        self.devices.contains_key(&device)
    }

    /// The known devices of one memory type.
    pub fn devices_of(&self, memory_type: MemoryType) -> impl Iterator<Item = Device> + '_ {
        self.devices
            .keys()
            .copied()
            .filter(move |d| d.memory_type() == memory_type)
    }

    /// All known devices.
    pub fn devices(&self) -> impl Iterator<Item = Device> + '_ {
        self.devices.keys().copied()
    }

    /// The physical identifier of a device, if known.
    pub fn uuid(&self, device: Device) -> Option<&str> {
        self.devices.get(&device).and_then(|u| u.as_deref())
    }

    /// Whether two devices are the same hardware: equal, both in host RAM, or equal UUIDs.
    pub fn same_physical(&self, a: Device, b: Device) -> bool {
        if a == b || (a.is_host_memory() && b.is_host_memory()) {
            return true;
        }
        matches!((self.uuid(a), self.uuid(b)), (Some(x), Some(y)) if x == y)
    }

    /// Whether `a` can copy to `b` directly.
    pub fn can_access_peer(&self, a: Device, b: Device) -> bool {
        self.peers.contains(&(a, b))
    }

    /// Why a memory type's backend is unavailable, if it was registered as such.
    pub fn unavailable_reason(&self, memory_type: MemoryType) -> Option<&str> {
        self.unavailable.get(&memory_type).map(String::as_str)
    }
}

/// Result of one hop: the converted array and how many bytes crossed a bus or were copied.
#[derive(Debug)]
pub struct Converted {
    /// The array at the hop's destination.
    pub array: Array,
    /// Bytes moved (0 for zero-copy or in place).
    pub bytes_moved: u64,
}

/// Moves arrays from one memory type to another (or between devices of one type).
pub trait Converter: Send + Sync {
    /// Source memory type.
    fn source(&self) -> MemoryType;
    /// Target memory type.
    fn target(&self) -> MemoryType;
    /// How this converter would move data from `src` to `dst`, or `None` if it cannot.
    ///
    /// Must be **pure**: decide only from its arguments and configuration captured at
    /// construction; never touch a device. The planner calls it freely.
    fn edge(&self, src: Device, dst: Device, topology: &Topology) -> Option<TransferKind>;
    /// Execute one hop planned with [`Converter::edge`]. Returns when the data is complete
    /// (see the module's completion contract).
    fn convert(&self, array: Array, dst: Device, kind: TransferKind) -> Result<Converted>;
}

/// What the observer receives for each conversion.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ConversionRecord {
    /// The route taken.
    pub route: Route,
    /// Total bytes moved over all hops.
    pub bytes_moved: u64,
    /// Wall time of the whole conversion.
    pub duration: Duration,
}

/// Events of OOM handling that an observer hears about.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum OomEvent {
    /// An attempt ran out of memory; pools were released and the operation will be retried.
    Retry {
        /// Device.
        device: Device,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// Bytes the pools gave back.
        released: u64,
    },
    /// Retries were exhausted; the batch is split in two.
    SplitBatch {
        /// Device.
        device: Device,
        /// Items in the batch that failed.
        len: usize,
    },
    /// Retries were exhausted; the work runs on the CPU instead (opt-in).
    CpuFallback {
        /// Device that ran out of memory.
        device: Device,
        /// The error that caused the fallback.
        reason: String,
    },
}

/// Receives conversion records and OOM events. Install with [`Registry::set_observer`].
pub trait ConversionObserver: Send + Sync {
    /// Called after every successful conversion.
    fn on_conversion(&self, record: &ConversionRecord);
    /// Called for OOM retries, batch splits and CPU fallbacks.
    fn on_oom_event(&self, _event: &OomEvent) {}
}

/// Plan the cheapest route with the converters' edges over `topology`. Pure: reads its arguments
/// only.
pub fn plan_route(
    topology: &Topology,
    converters: &[Arc<dyn Converter>],
    src: MemoryType,
    src_device: Device,
    dst: MemoryType,
    dst_device: Device,
) -> Result<Route> {
    for (mt, dev) in [(src, src_device), (dst, dst_device)] {
        if !mt.can_live_on(dev) {
            return Err(BridgeError::InvalidPlacement {
                memory_type: mt,
                device: dev,
            });
        }
        if !topology.has_device(dev) {
            let known: Vec<String> = topology.devices_of(mt).map(|d| d.to_string()).collect();
            if known.is_empty() {
                let reason = topology
                    .unavailable_reason(mt)
                    .map(str::to_owned)
                    .unwrap_or_else(|| {
                        format!("the {mt} backend is not registered (not compiled in?)")
                    });
                return Err(BridgeError::BackendUnavailable {
                    backend: mt.name().to_owned(),
                    reason,
                });
            }
            return Err(BridgeError::UnknownDevice {
                device: dev,
                available: format!("{mt} devices available: {}", known.join(", ")),
            });
        }
    }
    let from = Endpoint {
        memory_type: src,
        device: src_device,
    };
    let to = Endpoint {
        memory_type: dst,
        device: dst_device,
    };
    if from == to {
        return Ok(Route {
            from,
            to,
            steps: Vec::new(),
        });
    }
    // Dijkstra over endpoints; ties broken by hop count, then by endpoint order (deterministic).
    let nodes: Vec<Endpoint> = topology
        .devices()
        .map(|d| Endpoint {
            memory_type: d.memory_type(),
            device: d,
        })
        .collect();
    let mut best: BTreeMap<Endpoint, (u32, usize)> = BTreeMap::new();
    let mut prev: BTreeMap<Endpoint, Step> = BTreeMap::new();
    let mut heap = BinaryHeap::new();
    best.insert(from, (0, 0));
    heap.push(Reverse((0u32, 0usize, from)));
    while let Some(Reverse((cost, hops, node))) = heap.pop() {
        if best.get(&node).is_some_and(|&b| b < (cost, hops)) {
            continue;
        }
        if node == to {
            break;
        }
        for c in converters.iter().filter(|c| c.source() == node.memory_type) {
            for next in nodes
                .iter()
                .filter(|n| n.memory_type == c.target() && **n != node)
            {
                let Some(kind) = c.edge(node.device, next.device, topology) else {
                    continue;
                };
                let cand = (cost + kind.cost(), hops + 1);
                if best.get(next).is_none_or(|&b| cand < b) {
                    best.insert(*next, cand);
                    prev.insert(
                        *next,
                        Step {
                            from: node,
                            to: *next,
                            kind,
                        },
                    );
                    heap.push(Reverse((cand.0, cand.1, *next)));
                }
            }
        }
    }
    if !prev.contains_key(&to) {
        return Err(BridgeError::NoRoute {
            from_type: src,
            from_device: src_device,
            to_type: dst,
            to_device: dst_device,
            reason: "no registered converter, alone or chained, connects them".into(),
        });
    }
    let mut steps = Vec::new();
    let mut at = to;
    while at != from {
        let Some(step) = prev.get(&at) else { break };
        steps.push(*step);
        at = step.from;
    }
    steps.reverse();
    Ok(Route { from, to, steps })
}

/// The registry of backends and converters.
///
/// `Registry` is `Send + Sync`: conversions may run from many threads at once.
pub struct Registry {
    backends: Vec<Arc<dyn Backend>>,
    converters: Vec<Arc<dyn Converter>>,
    reports: Vec<BackendReport>,
    topology: Topology,
    observer: Option<Arc<dyn ConversionObserver>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("topology", &self.topology)
            .field("converters", &self.converters.len())
            .finish()
    }
}

impl Registry {
    /// A registry that knows only the host.
    pub fn new() -> Self {
        Registry {
            backends: Vec::new(),
            converters: Vec::new(),
            reports: Vec::new(),
            topology: Topology::host_only(),
            observer: None,
        }
    }

    /// Register a backend: enumerate its devices once (a failure marks it unavailable, with the
    /// reason, rather than failing), snapshot peer access, and add its converters.
    pub fn register_backend(&mut self, backend: Arc<dyn Backend>) {
        let mt = backend.memory_type();
        match backend.devices() {
            Ok(devices) if devices.is_empty() => {
                self.mark_unavailable(backend.name(), mt, "no device found");
            }
            Ok(devices) => {
                for d in &devices {
                    self.topology.add_device(d.device, d.uuid.clone());
                }
                for a in &devices {
                    for b in &devices {
                        if a.device != b.device && backend.can_access_peer(a.device, b.device) {
                            self.topology.add_peer(a.device, b.device);
                        }
                    }
                }
                self.reports.push(BackendReport {
                    name: backend.name().to_owned(),
                    memory_type: mt,
                    devices,
                    unavailable: None,
                });
                self.converters.extend(backend.converters());
                self.backends.push(backend);
            }
            Err(e) => {
                let reason = match e {
                    BridgeError::BackendUnavailable { reason, .. } => reason,
                    other => other.to_string(),
                };
                self.mark_unavailable(backend.name(), mt, &reason);
            }
        }
    }

    /// Record that a backend cannot be used (not compiled in, library missing...).
    pub fn mark_unavailable(&mut self, name: &str, memory_type: MemoryType, reason: &str) {
        if self.topology.devices_of(memory_type).next().is_none() {
            self.topology.set_unavailable(memory_type, reason);
        }
        self.reports.push(BackendReport {
            name: name.to_owned(),
            memory_type,
            devices: Vec::new(),
            unavailable: Some(reason.to_owned()),
        });
    }

    /// Add a converter on its own (backends normally contribute theirs through
    /// [`Registry::register_backend`]).
    pub fn register_converter(&mut self, converter: Arc<dyn Converter>) {
        self.converters.push(converter);
    }

    /// Add a device to the topology directly (for backends registered piecewise, and tests).
    pub fn topology_mut(&mut self) -> &mut Topology {
        &mut self.topology
    }

    /// The device snapshot the planner uses.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// One report per registered backend (available or not).
    pub fn reports(&self) -> &[BackendReport] {
        &self.reports
    }

    /// Every device of every available backend.
    pub fn device_infos(&self) -> impl Iterator<Item = &DeviceInfo> {
        self.reports.iter().flat_map(|r| r.devices.iter())
    }

    /// The registered, available backends.
    pub fn backends(&self) -> &[Arc<dyn Backend>] {
        &self.backends
    }

    /// The backend that owns `device`, if registered.
    pub fn backend_for(&self, device: Device) -> Option<&Arc<dyn Backend>> {
        self.backends
            .iter()
            .find(|b| b.memory_type() == device.memory_type())
    }

    /// Install (or remove) the observer that receives [`ConversionRecord`]s and [`OomEvent`]s.
    pub fn set_observer(&mut self, observer: Option<Arc<dyn ConversionObserver>>) {
        self.observer = observer;
    }

    /// The installed observer.
    pub fn observer(&self) -> Option<&Arc<dyn ConversionObserver>> {
        self.observer.as_ref()
    }

    /// Plan a conversion without touching any device. See [`plan_route`].
    pub fn plan(
        &self,
        src: MemoryType,
        src_device: Device,
        dst: MemoryType,
        dst_device: Device,
    ) -> Result<Route> {
        plan_route(
            &self.topology,
            &self.converters,
            src,
            src_device,
            dst,
            dst_device,
        )
    }

    /// Convert `array` to `dst` memory on `dst_device`, following the planned route. The
    /// request is validated before anything moves.
    pub fn convert(&self, array: Array, dst: MemoryType, dst_device: Device) -> Result<Array> {
        let route = self.plan(array.memory_type(), array.device(), dst, dst_device)?;
        let start = self.observer.as_ref().map(|_| Instant::now());
        let mut bytes_moved = 0u64;
        let mut array = array;
        for step in &route.steps {
            let conv = self
                .converters
                .iter()
                .find(|c| {
                    c.source() == step.from.memory_type
                        && c.target() == step.to.memory_type
                        && c.edge(step.from.device, step.to.device, &self.topology)
                            == Some(step.kind)
                })
                .ok_or_else(|| BridgeError::NoRoute {
                    from_type: step.from.memory_type,
                    from_device: step.from.device,
                    to_type: step.to.memory_type,
                    to_device: step.to.device,
                    reason: "the planned converter disappeared".into(),
                })?;
            let out = conv.convert(array, step.to.device, step.kind)?;
            bytes_moved += out.bytes_moved;
            array = out.array;
        }
        if let (Some(obs), Some(start)) = (&self.observer, start) {
            obs.on_conversion(&ConversionRecord {
                route,
                bytes_moved,
                duration: start.elapsed(),
            });
        }
        Ok(array)
    }

    /// Release cached pool memory of EVERY registered backend on `device` and on every device
    /// that is the same hardware (e.g. `cuda:0` and `torch:cuda:0`). Returns bytes released.
    pub fn release_pools(&self, device: Device) -> u64 {
        let mut total = 0;
        for b in &self.backends {
            for d in self.topology.devices_of(b.memory_type()) {
                if self.topology.same_physical(d, device) {
                    total += b.release_pool(d);
                }
            }
        }
        total
    }

    /// Memory figures for a device from its backend.
    pub fn memory_stats(&self, device: Device) -> Result<MemoryStats> {
        match self.backend_for(device) {
            Some(b) => b.memory_stats(device),
            None => Err(BridgeError::BackendUnavailable {
                backend: device.memory_type().name().to_owned(),
                reason: self
                    .topology
                    .unavailable_reason(device.memory_type())
                    .unwrap_or("not registered")
                    .to_owned(),
            }),
        }
    }
}
