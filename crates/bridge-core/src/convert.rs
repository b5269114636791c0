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

// The planner (pure) and the registry (which executes plans) live in their own modules so that
// `backend.rs` (which names `Converter`) and the registry (which names `Backend`) do not import
// each other; this module is their public home.
pub use crate::planner::{
    Converted, Converter, Endpoint, Route, Step, Topology, TransferKind, plan_route,
};
pub use crate::registry::{ConversionObserver, ConversionRecord, OomEvent, Registry};
