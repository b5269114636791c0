//! The torch converters the registry plans with.
//!
//! | hop | edge kind | what happens |
//! |---|---|---|
//! | host `cpu` → `torch:cpu` | zero-copy | `from_blob` alias of the ndarray (any non-negative strides); a negative-stride array is copied to C order once (bytes moved reported) |
//! | `torch:cpu` → host `cpu` | zero-copy | the original ndarray handed back when the tensor is its sole alias; otherwise a copy into a new C-order ndarray |
//! | host `cpu` → `torch:cuda:N` | pinned-staged | the host data (aliased, not copied) is copied into pinned memory, then uploaded with a non-blocking copy, then the device is synchronised |
//! | `torch:cuda:N` → host `cpu` | pinned-staged | a blocking device→host copy straight into a new ndarray (the CUDA driver stages pageable copies through its own pinned buffers) |
//! | `torch:cpu` ↔ `torch:cuda:N` | pinned-staged | `Tensor::to(device)` (host side pinned first when uploading), synchronised |
//! | `torch:cuda:A` → `torch:cuda:B` | peer-copy when the topology says A reaches B, else pinned-staged | `Tensor::to(device)`, both devices synchronised |
//!
//! The edge kind of a zero-copy hop is what the planner prices; the [`Converted::bytes_moved`]
//! of the hop says what actually happened (0 for a real zero-copy).
//!
//! Torch-CUDA ↔ bridge-cuda (`cuda:N`) exchange is zero-copy with the `cuda-interop` feature
//! (see the `cuda_interop` module); without it the planner routes through the host.

use std::sync::Arc;

use bridge_core::convert::{Converted, Converter, Topology, TransferKind};
use bridge_core::{Array, BridgeError, Device, HostData, MemoryType, Result};
use tch::Tensor;

use crate::error::map_torch_error;
use crate::ffi::{self, HostOwner, Place};
use crate::storage::{TorchStorage, not_torch};

fn place_of(device: Device) -> Result<Place> {
    match device {
        Device::TorchCpu => Ok(Place::Cpu),
        Device::TorchCuda(n) => Ok(Place::Cuda(n)),
        other => Err(BridgeError::InvalidPlacement {
            memory_type: MemoryType::Torch,
            device: other,
        }),
    }
}

fn sync(place: Place) -> Result<()> {
    if let Place::Cuda(n) = place {
        ffi::cuda_synchronize(n).map_err(|m| map_torch_error(place.device(), 0, &m))?;
    }
    Ok(())
}

/// Host data as a `torch:cpu` tensor: `(storage, bytes copied)`. Zero-copy unless a stride is
/// negative.
pub fn host_to_torch_cpu(data: HostData) -> Result<(TorchStorage, u64)> {
    let dtype = data.dtype();
    let owner = Arc::new(HostOwner::new(data));
    if let Some(t) = ffi::alias_host(&owner)? {
        return Ok((TorchStorage::aliasing(t, dtype, owner), 0));
    }
    // A negative stride: copy once into C order, then alias the copy.
    let c_order: HostData = bridge_core::with_host_data!(owner.data(), a => {
        bridge_core::HostElement::wrap(a.as_standard_layout().into_owned())
    });
    let moved = (c_order.shape().iter().product::<usize>() * dtype.size_of()) as u64;
    let owner = Arc::new(HostOwner::new(c_order));
    let t = ffi::alias_host(&owner)?.ok_or_else(|| {
        BridgeError::backend("torch", None, "C-order copy still has negative strides")
    })?;
    Ok((TorchStorage::aliasing(t, dtype, owner), moved))
}

/// A torch storage back to host data: `(data, bytes copied)`. Zero-copy when the tensor is the
/// sole alias of an ndarray; a copy otherwise (from any device).
pub fn torch_to_host(storage: TorchStorage) -> Result<(HostData, u64)> {
    let (tensor, dtype, _device, owner) = storage.into_parts();
    if let Some(owner) = owner {
        if !ffi::aliases(&tensor, &owner) {
            // The tensor was replaced through `tensor_mut`: its data is what counts.
            let data = ffi::copy_to_host(&tensor, dtype)?;
            let moved = nbytes_of(&data);
            return Ok((data, moved));
        }
        // Give our handle up first: if it was the last one, torch runs the storage deleter
        // (dropping its reference to the owner) and the owner becomes unique.
        drop(tensor);
        return match Arc::try_unwrap(owner) {
            Ok(o) => Ok((o.into_data(), 0)),
            Err(shared) => {
                // Other tensor handles still view the buffer: copy it (through torch, so no Rust
                // reference to memory torch may write is created).
                let alias = ffi::alias_host(&shared)?.ok_or_else(|| {
                    BridgeError::backend("torch", None, "aliased ndarray has negative strides")
                })?;
                let data = ffi::copy_to_host(&alias, dtype)?;
                let moved = nbytes_of(&data);
                Ok((data, moved))
            }
        };
    }
    let data = ffi::copy_to_host(&tensor, dtype)?;
    let moved = nbytes_of(&data);
    Ok((data, moved))
}

fn nbytes_of(d: &HostData) -> u64 {
    (d.shape().iter().product::<usize>() * d.dtype().size_of()) as u64
}

/// Move a tensor to another torch device (a copy; synchronised).
pub fn move_tensor(tensor: &Tensor, dst: Device) -> Result<Tensor> {
    let place = place_of(dst)?;
    let src_place = ffi::device_place(tensor);
    // The pinned staging copy must outlive the non-blocking upload: keep it to the end.
    let mut staging = None;
    let out = match (src_place, place) {
        (Place::Cpu, Place::Cuda(_)) => {
            let pinned = if ffi::is_pinned(tensor) {
                tensor.shallow_clone()
            } else {
                ffi::pin_memory(tensor)?
            };
            let out = ffi::to_device(&pinned, place, true)?;
            staging = Some(pinned);
            out
        }
        _ => ffi::to_device(tensor, place, false)?,
    };
    sync(src_place)?;
    sync(place)?;
    drop(staging);
    Ok(out)
}

fn take_torch(array: Array) -> Result<TorchStorage> {
    let err = not_torch(&array);
    array
        .into_storage::<TorchStorage>()
        .map(|(s, _, _)| *s)
        .map_err(|_| err)
}

/// Host (`cpu`) → torch (`torch:cpu`, `torch:cuda:N`).
#[derive(Debug, Default, Clone, Copy)]
pub struct HostToTorch;

impl Converter for HostToTorch {
    fn source(&self) -> MemoryType {
        MemoryType::Host
    }
    fn target(&self) -> MemoryType {
        MemoryType::Torch
    }
    fn edge(&self, src: Device, dst: Device, _topology: &Topology) -> Option<TransferKind> {
        match (src, dst) {
            (Device::Cpu, Device::TorchCpu) => Some(TransferKind::ZeroCopy),
            (Device::Cpu, Device::TorchCuda(_)) => Some(TransferKind::PinnedStaged),
            _ => None,
        }
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        let data = array.into_host()?;
        let (storage, moved) = host_to_torch_cpu(data)?;
        match dst {
            Device::TorchCpu => Ok(Converted {
                array: storage.into_array()?,
                bytes_moved: moved,
            }),
            Device::TorchCuda(_) => {
                let bytes = storage.nbytes_u64();
                let t = move_tensor(&storage.into_tensor(), dst)?;
                Ok(Converted {
                    array: TorchStorage::from_tensor(t)?.into_array()?,
                    bytes_moved: moved + bytes,
                })
            }
            other => Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Torch,
                device: other,
            }),
        }
    }
}

/// Torch (`torch:cpu`, `torch:cuda:N`) → host (`cpu`).
#[derive(Debug, Default, Clone, Copy)]
pub struct TorchToHost;

impl Converter for TorchToHost {
    fn source(&self) -> MemoryType {
        MemoryType::Torch
    }
    fn target(&self) -> MemoryType {
        MemoryType::Host
    }
    fn edge(&self, src: Device, dst: Device, _topology: &Topology) -> Option<TransferKind> {
        match (src, dst) {
            (Device::TorchCpu, Device::Cpu) => Some(TransferKind::ZeroCopy),
            (Device::TorchCuda(_), Device::Cpu) => Some(TransferKind::PinnedStaged),
            _ => None,
        }
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        if dst != Device::Cpu {
            return Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Host,
                device: dst,
            });
        }
        let src = array.device();
        let storage = take_torch(array)?;
        let (data, moved) = torch_to_host(storage)?;
        if let Some(n) = src.ordinal() {
            sync(Place::Cuda(n))?;
        }
        Ok(Converted {
            array: Array::from_host(data),
            bytes_moved: moved,
        })
    }
}

/// Torch device moves: `torch:cpu` ↔ `torch:cuda:N`, `torch:cuda:A` → `torch:cuda:B`.
#[derive(Debug, Default, Clone, Copy)]
pub struct TorchToTorch;

impl Converter for TorchToTorch {
    fn source(&self) -> MemoryType {
        MemoryType::Torch
    }
    fn target(&self) -> MemoryType {
        MemoryType::Torch
    }
    fn edge(&self, src: Device, dst: Device, topology: &Topology) -> Option<TransferKind> {
        match (src, dst) {
            (Device::TorchCpu, Device::TorchCuda(_)) | (Device::TorchCuda(_), Device::TorchCpu) => {
                Some(TransferKind::PinnedStaged)
            }
            (Device::TorchCuda(a), Device::TorchCuda(b)) if a != b => {
                if topology.can_access_peer(src, dst) {
                    Some(TransferKind::PeerCopy)
                } else {
                    Some(TransferKind::PinnedStaged)
                }
            }
            _ => None,
        }
    }
    fn convert(&self, array: Array, dst: Device, _kind: TransferKind) -> Result<Converted> {
        let storage = take_torch(array)?;
        let bytes = storage.nbytes_u64();
        let t = storage.with_tensor(|t| move_tensor(t, dst))?;
        let out = TorchStorage::from_tensor(t)?;
        Ok(Converted {
            array: out.into_array()?,
            bytes_moved: bytes,
        })
    }
}

/// Every torch converter.
pub fn converters() -> Vec<Arc<dyn Converter>> {
    vec![
        Arc::new(HostToTorch),
        Arc::new(TorchToHost),
        Arc::new(TorchToTorch),
    ]
}
