//! The [`Registry`] of backends and converters, which executes the routes the planner
//! ([`plan_route`]) finds, and the observer interface ([`ConversionObserver`],
//! [`ConversionRecord`], [`OomEvent`]). Re-exported from [`crate::convert`], its public home.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::array::Array;
use crate::backend::{Backend, BackendReport, DeviceInfo};
use crate::device::{Device, MemoryType};
use crate::dlpack::DlpackExchange;
use crate::error::{BridgeError, Result};
use crate::memory::{MemoryLimit, MemoryStats};
use crate::planner::{Converter, Route, Topology, plan_route};

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

/// The registry of backends and converters.
///
/// `Registry` is `Send + Sync`: conversions may run from many threads at once.
pub struct Registry {
    backends: Vec<Arc<dyn Backend>>,
    converters: Vec<Arc<dyn Converter>>,
    reports: Vec<BackendReport>,
    topology: Topology,
    /// Behind a lock so that the process registry (a shared `&'static Registry`) can be
    /// observed too.
    observer: RwLock<Option<Arc<dyn ConversionObserver>>>,
    dlpack: Vec<Arc<dyn DlpackExchange>>,
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
            observer: RwLock::new(None),
            dlpack: Vec::new(),
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

    /// Add a backend's DLPack exchange (the DLPack route for its memory type; see
    /// [`crate::dlpack`]). A later one for the same memory type replaces an earlier one.
    pub fn register_dlpack(&mut self, exchange: Arc<dyn DlpackExchange>) {
        self.dlpack
            .retain(|e| e.memory_type() != exchange.memory_type());
        self.dlpack.push(exchange);
    }

    /// The DLPack exchange registered for `memory_type`, if any.
    pub fn dlpack_exchange(&self, memory_type: MemoryType) -> Option<&Arc<dyn DlpackExchange>> {
        self.dlpack.iter().find(|e| e.memory_type() == memory_type)
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

    /// Install (or remove) the observer that receives [`ConversionRecord`]s and [`OomEvent`]s
    /// (also on a shared registry, such as the process one: later conversions report to it).
    pub fn set_observer(&self, observer: Option<Arc<dyn ConversionObserver>>) {
        *self
            .observer
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = observer;
    }

    /// The registered backend of type `B` (the instance itself: its devices' contexts, queues,
    /// pools and compiled programs), or `None` when no such backend was registered or it had no
    /// device. This is how the live state of a device is reached: the registry owns it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bridge_core::backend::{Backend, DeviceInfo};
    /// use bridge_core::convert::{Converter, Registry};
    /// use bridge_core::memory::{MemoryInfo, MemoryLimit, MemoryStats};
    /// use bridge_core::{Device, MemoryType, Result};
    ///
    /// struct OneCard;
    /// impl MemoryInfo for OneCard {
    ///     fn memory_stats(&self, _: Device) -> Result<MemoryStats> { Ok(MemoryStats::default()) }
    ///     fn set_memory_limit(&self, _: Device, _: Option<MemoryLimit>) -> Result<()> { Ok(()) }
    /// }
    /// impl Backend for OneCard {
    ///     fn name(&self) -> &'static str { "one-card" }
    ///     fn memory_type(&self) -> MemoryType { MemoryType::OpenCl }
    ///     fn devices(&self) -> Result<Vec<DeviceInfo>> {
    ///         Ok(vec![DeviceInfo::new(Device::OpenCl(0), "a card")])
    ///     }
    ///     fn release_pool(&self, _: Device) -> u64 { 0 }
    ///     fn converters(&self) -> Vec<Arc<dyn Converter>> { vec![] }
    /// }
    /// let card = Arc::new(OneCard);
    /// let mut reg = Registry::new();
    /// reg.register_backend(card.clone());
    /// assert!(Arc::ptr_eq(&reg.backend_of::<OneCard>().unwrap(), &card)); // the same instance
    /// ```
    pub fn backend_of<B: Backend>(&self) -> Option<Arc<B>> {
        self.backends.iter().find_map(|b| {
            let any: Arc<dyn std::any::Any + Send + Sync> = Arc::clone(b) as _;
            any.downcast::<B>().ok()
        })
    }

    /// The installed observer.
    pub fn observer(&self) -> Option<Arc<dyn ConversionObserver>> {
        self.observer
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
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
        let start = self.observer().map(|_| Instant::now());
        let (array, bytes_moved) = self.follow(array, &route.steps, 0)?;
        self.record(route, bytes_moved, start);
        Ok(array)
    }

    /// A copy of `array` in `dst` memory on `dst_device`, leaving `array` as it is: the planned
    /// route (peer, staged, through the host: what the planner picks, recorded for the
    /// observer) with its first hop copying from the borrowed array. On the array's own device
    /// it is a copy there (a [`TransferKind`](crate::planner::TransferKind) `DeviceCopy` hop,
    /// or a host copy for host memory). [`BridgeError::Unsupported`] when the first hop is one
    /// that takes the array's memory over (zero-copy): convert the array itself then.
    pub fn copy(&self, array: &Array, dst: MemoryType, dst_device: Device) -> Result<Array> {
        let src = (array.memory_type(), array.device());
        let mut route = self.plan(src.0, src.1, dst, dst_device)?;
        let start = self.observer().map(|_| Instant::now());
        if route.steps.is_empty() {
            if src.0 == MemoryType::Host {
                let out = Array::from_host(array.host()?.clone());
                let n = out.nbytes() as u64;
                self.record(route, n, start);
                return Ok(out);
            }
            route.steps.push(crate::planner::Step {
                from: route.from,
                to: route.to,
                kind: crate::planner::TransferKind::DeviceCopy,
            });
        }
        let first = &route.steps[0];
        let conv = self.converter_for(first)?;
        let out = conv
            .copy(array, first.to.device, first.kind)
            .unwrap_or_else(|| {
                Err(BridgeError::Unsupported(format!(
                    "a copy of an array on {}: its first hop ({} to {}, {}) takes the array's \
                     memory over; convert the array itself",
                    src.1, first.from.memory_type, first.to.device, first.kind
                )))
            })?;
        let (out, bytes_moved) = self.follow(out.array, &route.steps[1..], out.bytes_moved)?;
        self.record(route, bytes_moved, start);
        Ok(out)
    }

    /// The converter of a planned hop.
    fn converter_for(&self, step: &crate::planner::Step) -> Result<&Arc<dyn Converter>> {
        self.converters
            .iter()
            .find(|c| {
                c.source() == step.from.memory_type
                    && c.target() == step.to.memory_type
                    && c.edge(step.from.device, step.to.device, &self.topology) == Some(step.kind)
            })
            .ok_or_else(|| BridgeError::NoRoute {
                from_type: step.from.memory_type,
                from_device: step.from.device,
                to_type: step.to.memory_type,
                to_device: step.to.device,
                reason: "the planned converter disappeared".into(),
            })
    }

    /// `array` taken through `steps`, with the bytes moved added to `bytes_moved`.
    fn follow(
        &self,
        mut array: Array,
        steps: &[crate::planner::Step],
        mut bytes_moved: u64,
    ) -> Result<(Array, u64)> {
        for step in steps {
            let out = self
                .converter_for(step)?
                .convert(array, step.to.device, step.kind)?;
            bytes_moved += out.bytes_moved;
            array = out.array;
        }
        Ok((array, bytes_moved))
    }

    /// The observer hears of a finished conversion.
    fn record(&self, route: Route, bytes_moved: u64, start: Option<Instant>) {
        if let (Some(obs), Some(start)) = (self.observer(), start) {
            obs.on_conversion(&ConversionRecord {
                route,
                bytes_moved,
                duration: start.elapsed(),
            });
        }
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
        self.backend_or_err(device)?.memory_stats(device)
    }

    /// Limit what `device`'s backend pool may hold (`None` removes the limit; cached blocks
    /// above a new, lower limit are released). Allocations beyond it are
    /// [`BridgeError::OutOfMemory`], which the pipelines answer by splitting their batches.
    pub fn set_memory_limit(&self, device: Device, limit: Option<MemoryLimit>) -> Result<()> {
        self.backend_or_err(device)?.set_memory_limit(device, limit)
    }

    fn backend_or_err(&self, device: Device) -> Result<&Arc<dyn Backend>> {
        self.backend_for(device)
            .ok_or_else(|| BridgeError::BackendUnavailable {
                backend: device.memory_type().name().to_owned(),
                reason: self
                    .topology
                    .unavailable_reason(device.memory_type())
                    .unwrap_or("not registered")
                    .to_owned(),
            })
    }
}
