//! Mapping libtorch errors onto [`BridgeError`].
//!
//! libtorch reports failures as C++ exceptions whose text tch hands over as a string. The mapping
//! is a pure function of that text: the CUDA caching allocator's out-of-memory error
//! (`c10::OutOfMemoryError`, "CUDA out of memory. Tried to allocate 2.00 GiB ...") and the CUDA
//! runtime's `cudaErrorMemoryAllocation` ("CUDA error: out of memory") become
//! [`BridgeError::OutOfMemory`] — and nothing else does (a CPU allocation failure, an illegal
//! address, a shape error stay [`BridgeError::Backend`]), so OOM retry acts on exactly the errors
//! that releasing cached device memory can fix.

use bridge_core::{BridgeError, Device};

/// True when `message` is libtorch's CUDA out-of-memory error.
pub fn is_cuda_oom(message: &str) -> bool {
    message.contains("CUDA out of memory")
        || message.contains("OutOfMemoryError")
        || message.contains("CUDA error: out of memory")
        || message.contains("cudaErrorMemoryAllocation")
}

/// The byte count in "Tried to allocate 2.00 GiB" (libtorch's OOM message), if present.
pub fn requested_bytes(message: &str) -> Option<u64> {
    let rest = message.split("Tried to allocate ").nth(1)?;
    let mut parts = rest.split_whitespace();
    let number: f64 = parts.next()?.parse().ok()?;
    let unit = parts.next()?.trim_end_matches(['.', ',', ';', ')']);
    let scale: f64 = match unit {
        "B" | "bytes" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((number * scale).round() as u64)
}

/// Map a libtorch error message on `device` to a [`BridgeError`]: CUDA OOM to
/// [`BridgeError::OutOfMemory`] (with the requested size from the message when it says, else
/// `requested`), everything else to [`BridgeError::Backend`] with backend `torch`.
pub fn map_torch_error(device: Device, requested: u64, message: &str) -> BridgeError {
    if is_cuda_oom(message) {
        BridgeError::OutOfMemory {
            device,
            requested: requested_bytes(message).unwrap_or(requested),
            attempts: 1,
        }
    } else {
        BridgeError::backend("torch", None, message)
    }
}

/// Map a [`tch::TchError`] on `device` (see [`map_torch_error`]).
pub fn map_tch_error(device: Device, requested: u64, err: &tch::TchError) -> BridgeError {
    map_torch_error(device, requested, &err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OOM: &str = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity \
        of 79.19 GiB of which 1.06 GiB is free. Of the allocated memory 76.1 GiB is allocated by \
        PyTorch, and 1.2 GiB is reserved by PyTorch but unallocated.";

    #[test]
    fn cuda_oom_maps_to_out_of_memory() {
        let e = map_torch_error(Device::TorchCuda(0), 7, OOM);
        assert!(
            matches!(
                e,
                BridgeError::OutOfMemory { device: Device::TorchCuda(0), requested, attempts: 1 }
                    if requested == 2 << 30
            ),
            "{e:?}"
        );
        assert!(e.is_oom());
        let e = map_torch_error(
            Device::TorchCuda(1),
            64,
            "torch.OutOfMemoryError: allocation failed",
        );
        assert!(matches!(e, BridgeError::OutOfMemory { requested: 64, .. }));
        let e = map_torch_error(
            Device::TorchCuda(0),
            5,
            "CUDA error: out of memory\nCompile with `TORCH_USE_CUDA_DSA`",
        );
        assert!(e.is_oom());
    }

    #[test]
    fn other_errors_are_not_oom() {
        for msg in [
            "CUDA error: an illegal memory access was encountered",
            "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: not enough memory: you tried to allocate 1099511627776 bytes.",
            "shape '[2, 3]' is invalid for input of size 7",
            "Expected all tensors to be on the same device",
            "out of range: memory",
            "",
        ] {
            let e = map_torch_error(Device::TorchCuda(0), 1, msg);
            assert!(!e.is_oom(), "{msg}");
            assert!(matches!(e, BridgeError::Backend { ref backend, .. } if backend == "torch"));
        }
    }

    #[test]
    fn requested_sizes_parse() {
        assert_eq!(requested_bytes(OOM), Some(2 << 30));
        assert_eq!(
            requested_bytes("Tried to allocate 20.00 MiB (GPU 0)"),
            Some(20 << 20)
        );
        assert_eq!(requested_bytes("Tried to allocate 512 bytes."), Some(512));
        assert_eq!(requested_bytes("no size here"), None);
        assert_eq!(requested_bytes("Tried to allocate lots"), None);
    }
}
