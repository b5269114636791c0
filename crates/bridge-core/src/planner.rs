//! The pure route planner: the route graph's vocabulary ([`TransferKind`], [`Endpoint`],
//! [`Step`], [`Route`]), the device snapshot it reads ([`Topology`]), the [`Converter`] trait
//! whose declared edges it searches, and [`plan_route`] itself.
//!
//! Planning is a pure function of its arguments: it reads the topology and calls only the
//! converters' [`Converter::edge`], so no device is touched. Executing a plan
//! ([`Converter::convert`], hop by hop) is the [`Registry`](crate::convert::Registry)'s job, in
//! `registry.rs`; both modules are re-exported from [`crate::convert`], their public home.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;
use std::sync::Arc;

use crate::array::Array;
use crate::device::{Device, MemoryType};
use crate::error::{BridgeError, Result};

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

    /// `Ok` when `device` is known; else [`BridgeError::BackendUnavailable`] with the reason when
    /// its backend has no device at all (not compiled in, no driver), or
    /// [`BridgeError::UnknownDevice`] listing the devices of its memory type.
    pub fn check_device(&self, device: Device) -> Result<()> {
        if self.has_device(device) {
            return Ok(());
        }
        let mt = device.memory_type();
        let known: Vec<String> = self.devices_of(mt).map(|d| d.to_string()).collect();
        if known.is_empty() {
            let reason = self
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
        Err(BridgeError::UnknownDevice {
            device,
            available: format!("{mt} devices available: {}", known.join(", ")),
        })
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
    /// (see the completion contract of [`crate::convert`]).
    fn convert(&self, array: Array, dst: Device, kind: TransferKind) -> Result<Converted>;
    /// [`Converter::convert`] from a borrowed array, which stays as it is (the hop copies):
    /// `None` when this converter needs the array itself (a zero-copy hop hands its memory over).
    /// [`crate::convert::Registry::copy`] takes its first hop through this; the default is
    /// `None`.
    fn copy(&self, _array: &Array, _dst: Device, _kind: TransferKind) -> Option<Result<Converted>> {
        None
    }
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
        topology.check_device(dev)?;
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
