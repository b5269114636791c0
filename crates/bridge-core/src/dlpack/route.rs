//! The DLPack route of the planner and the registry: [`Registry::plan_from_dlpack`] (pure),
//! [`Registry::from_dlpack`] and [`Registry::to_dlpack`].
//!
//! A DLPack import is one extra first hop, from the tensor's memory to the same endpoint as an
//! arraybridge [`Array`] (`host@cpu`, `cuda@cuda:N`): `zero-copy` when the memory is adopted in
//! place (a CUDA tensor wrapped by the backend's [`DlpackExchange`](super::DlpackExchange), or a tensor arraybridge
//! exported itself and takes back), `host-copy` when a foreign host tensor is copied into an
//! ndarray (which owns its memory; read such tensors in place with
//! [`DlpackTensor::view`](super::DlpackTensor::view) instead). The planner's ordinary route
//! from there to the destination follows. The observer receives the import hop as its own
//! [`ConversionRecord`], then the rest as [`Registry::convert`] reports it.

use std::time::Instant;

use super::{DlpackTensor, ExportOptions, Exported, TensorInfo, export_host};
use crate::array::Array;
use crate::device::{Device, MemoryType};
use crate::error::{BridgeError, Result};
use crate::planner::{Endpoint, Route, Step, TransferKind};
use crate::registry::{ConversionRecord, Registry};

/// An imported array with the route it took.
#[derive(Debug)]
pub struct DlpackImport {
    /// The array, on the requested memory type and device.
    pub array: Array,
    /// The route: the import hop, then the planner's route.
    pub route: Route,
}

impl Registry {
    fn import_kind(&self, tensor: &DlpackTensor) -> Result<TransferKind> {
        let info: &TensorInfo = tensor.info();
        match info.device.memory_type() {
            MemoryType::Host => Ok(if super::manager_ctx_is_ours(tensor) {
                TransferKind::ZeroCopy
            } else {
                TransferKind::HostCopy
            }),
            mt => {
                if self.dlpack_exchange(mt).is_none() {
                    return Err(BridgeError::BackendUnavailable {
                        backend: mt.name().to_owned(),
                        reason: format!(
                            "no DLPack exchange is registered for {mt} memory ({})",
                            self.topology()
                                .unavailable_reason(mt)
                                .unwrap_or("backend not compiled in or not registered")
                        ),
                    });
                }
                // A strided device tensor is gathered into a contiguous buffer on its device
                // by the exchange (an exchange that cannot says so when it is asked).
                Ok(if info.is_contiguous() {
                    TransferKind::ZeroCopy
                } else {
                    TransferKind::DeviceCopy
                })
            }
        }
    }

    /// Plan importing `tensor` to `dst` memory on `dst_device`, without touching any device:
    /// the import hop, then [`Registry::plan`]'s route.
    pub fn plan_from_dlpack(
        &self,
        tensor: &DlpackTensor,
        dst: MemoryType,
        dst_device: Device,
    ) -> Result<Route> {
        let info = tensor.info();
        let at = Endpoint {
            memory_type: info.device.memory_type(),
            device: info.device,
        };
        let kind = self.import_kind(tensor)?;
        let rest = self.plan(at.memory_type, at.device, dst, dst_device)?;
        let mut steps = vec![Step {
            from: at,
            to: at,
            kind,
        }];
        steps.extend(rest.steps);
        Ok(Route {
            from: at,
            to: rest.to,
            steps,
        })
    }

    /// Import a DLPack tensor from any producer and convert it to `dst` memory on
    /// `dst_device` (see the [module docs](self)). The request is validated before anything
    /// moves.
    pub fn from_dlpack(
        &self,
        tensor: DlpackTensor,
        dst: MemoryType,
        dst_device: Device,
    ) -> Result<DlpackImport> {
        let route = self.plan_from_dlpack(&tensor, dst, dst_device)?;
        let start = self.observer().map(|_| Instant::now());
        let mt = tensor.info().device.memory_type();
        let (array, kind, bytes) = match mt {
            MemoryType::Host => {
                let n = tensor.info().nbytes() as u64;
                let (a, copied) = tensor.into_array()?;
                if copied {
                    (a, TransferKind::HostCopy, n)
                } else {
                    (a, TransferKind::ZeroCopy, 0)
                }
            }
            other => match self.dlpack_exchange(other) {
                Some(ex) => ex.import(tensor)?,
                None => unreachable!("planned above: the exchange is registered"),
            },
        };
        let mut route = route;
        route.steps[0].kind = kind;
        let import = route.steps[0];
        if let (Some(obs), Some(start)) = (self.observer(), start) {
            obs.on_conversion(&ConversionRecord {
                route: Route {
                    from: import.from,
                    to: import.to,
                    steps: vec![Step { kind, ..import }],
                },
                bytes_moved: bytes,
                duration: start.elapsed(),
            });
        }
        let array = if route.steps.len() > 1 {
            self.convert(array, dst, dst_device)?
        } else {
            array
        };
        Ok(DlpackImport { array, route })
    }

    /// Export `array` as a DLPack tensor: host arrays with [`export_host`] (zero-copy unless a
    /// stride is negative), device arrays with their backend's [`super::DlpackExchange`]
    /// (CUDA: zero-copy, the consumer stream waits on an event). Memory types without an
    /// exchange (OpenCL buffers, which no DLPack consumer reads; torch tensors, which torch
    /// exports itself) are an error: convert them first. The observer receives the export as
    /// a one-hop record.
    pub fn to_dlpack(&self, array: Array, opts: &ExportOptions) -> Result<Exported> {
        let at = Endpoint {
            memory_type: array.memory_type(),
            device: array.device(),
        };
        let start = self.observer().map(|_| Instant::now());
        let n = array.nbytes() as u64;
        let out = match at.memory_type {
            MemoryType::Host => export_host(array, opts)?,
            mt => match self.dlpack_exchange(mt) {
                Some(ex) => ex.export(array, opts)?,
                None => {
                    return Err(BridgeError::Unsupported(format!(
                        "{mt} memory on {} has no DLPack exchange: convert it to host (or CUDA) \
                         memory first",
                        at.device
                    )));
                }
            },
        };
        if let (Some(obs), Some(start)) = (self.observer(), start) {
            obs.on_conversion(&ConversionRecord {
                route: Route {
                    from: at,
                    to: at,
                    steps: vec![Step {
                        from: at,
                        to: at,
                        kind: out.kind(),
                    }],
                },
                bytes_moved: if out.copied { n } else { 0 },
                duration: start.elapsed(),
            });
        }
        Ok(out)
    }
}
