//! [`TorchBackend`]: discovery, memory figures, pool release and the converters.
//!
//! **CUDA loading.** The binary links libtorch's CPU libraries only (rustc links with
//! `--as-needed`, and nothing references `libtorch_cuda.so` directly). A static initialiser of
//! the C++ shim `dlopen`s `libtorch_cuda.so` (`RTLD_GLOBAL`, from the libtorch the crate was built
//! against, else by name) when the program starts — the run-time equivalent of linking it with
//! `-Wl,--no-as-needed`: its static initialisers register torch's CUDA backend before anything
//! can ask ATen about CUDA (ATen caches that answer for the life of the process). If loading
//! fails (CPU-only libtorch, CUDA libraries missing as in the CI wheel install, no driver) the
//! backend still offers `torch:cpu` and reports the reason; a binary never fails to start
//! because CUDA libraries are absent. `ARRAYBRIDGE_TORCH_NO_CUDA=1` skips the attempt.
//!
//! **Device identity.** `torch:cuda:N` reports the UUID of CUDA device N from the driver API
//! (`cuDeviceGetUuid`, `libcuda.so.1` loaded at run time) formatted like `nvidia-smi`
//! (`GPU-xxxxxxxx-...`, the format bridge-cuda uses), so the planner knows `torch:cuda:0` and
//! `cuda:0` are one GPU. torch's index N and the driver's ordinal N agree: both honour
//! `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`.
//!
//! **Memory.** `memory_stats(torch:cuda:N)` reports the CUDA caching allocator's figures
//! (`pool_in_use` = allocated bytes, `pool_reserved` = reserved bytes) plus free/total from
//! the driver, through `at::accelerator::getDeviceStats` / `getMemoryInfo`.
//! `release_pool(torch:cuda:N)` calls `at::accelerator::emptyCache()` (which empties the cache
//! of every device: torch has no per-device call) and returns the bytes device N gave back.
//! torch's allocator limit (`set_per_process_memory_fraction`) is not reachable through the C++
//! accelerator API, so `set_memory_limit` only accepts `None`.

use std::sync::Arc;

use bridge_core::backend::{Backend, Capabilities, DeviceInfo};
use bridge_core::convert::Converter;
use bridge_core::memory::{MemoryInfo, MemoryLimit, MemoryStats};
use bridge_core::{BridgeError, Device, MemoryType, Result};

use crate::cuda_state::cuda_state;
pub use crate::cuda_state::{cuda_device_count, cuda_unavailable_reason};
use crate::error::map_torch_error;
use crate::ffi;

/// The libtorch lib directory this crate was built against.
pub const LIBTORCH_LIB_DIR: &str = env!("ARRAYBRIDGE_TORCH_LIB_DIR");

/// Format a CUDA UUID as `nvidia-smi` does (the format bridge-cuda uses too).
pub fn format_uuid(bytes: [u8; 16]) -> String {
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The torch backend (tch / libtorch 2.11).
#[derive(Debug, Default)]
pub struct TorchBackend {
    _private: (),
}

impl TorchBackend {
    /// A backend handle. Cheap: CUDA is probed on the first `devices()` call.
    pub fn new() -> Self {
        TorchBackend { _private: () }
    }

    fn cuda_index(&self, device: Device) -> Result<Option<usize>> {
        match device {
            Device::TorchCpu => Ok(None),
            Device::TorchCuda(n) => {
                let count = cuda_device_count();
                if n < count {
                    Ok(Some(n))
                } else if count == 0 {
                    Err(BridgeError::unavailable(
                        "torch",
                        cuda_unavailable_reason().unwrap_or_default(),
                    ))
                } else {
                    Err(BridgeError::UnknownDevice {
                        device,
                        available: format!("torch CUDA devices: torch:cuda:0..{}", count - 1),
                    })
                }
            }
            other => Err(BridgeError::InvalidPlacement {
                memory_type: MemoryType::Torch,
                device: other,
            }),
        }
    }
}

impl MemoryInfo for TorchBackend {
    fn memory_stats(&self, device: Device) -> Result<MemoryStats> {
        match self.cuda_index(device)? {
            None => {
                let (total, free) = bridge_core::host::meminfo();
                Ok(MemoryStats {
                    total: total.unwrap_or(0),
                    free,
                    ..MemoryStats::default()
                })
            }
            Some(n) => match ffi::cuda_memory(n) {
                Ok(Some(m)) => Ok(MemoryStats {
                    total: m.total,
                    free: Some(m.free),
                    pool_reserved: m.reserved,
                    pool_in_use: m.allocated,
                    pool_cached: m.reserved.saturating_sub(m.allocated),
                    ..MemoryStats::default()
                }),
                Ok(None) => Err(BridgeError::unavailable(
                    "torch",
                    "torch has no CUDA backend",
                )),
                Err(e) => Err(map_torch_error(device, 0, &e)),
            },
        }
    }

    fn set_memory_limit(&self, device: Device, limit: Option<MemoryLimit>) -> Result<()> {
        self.cuda_index(device)?;
        match limit {
            None => Ok(()),
            Some(_) => Err(BridgeError::Unsupported(format!(
                "memory limits on {device}: libtorch's C++ accelerator API has no \
                 set_per_process_memory_fraction"
            ))),
        }
    }
}

impl Backend for TorchBackend {
    fn name(&self) -> &'static str {
        "torch"
    }

    fn memory_type(&self) -> MemoryType {
        MemoryType::Torch
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let (total, free) = bridge_core::host::meminfo();
        let cuda = cuda_state();
        let mut cpu = DeviceInfo::new(Device::TorchCpu, "libtorch CPU");
        cpu.total_memory = total;
        cpu.free_memory = free;
        cpu.capabilities = Capabilities {
            fp16: true,
            bf16: true,
            fp64: true,
            compute_units: std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u32),
            max_alloc: None,
            compute_capability: None,
        };
        cpu.details
            .push(("libtorch".to_owned(), LIBTORCH_LIB_DIR.to_owned()));
        cpu.details.push((
            "cuda".to_owned(),
            match cuda {
                Ok(n) => format!("{n} device(s)"),
                Err(e) => e.clone(),
            },
        ));
        let mut out = vec![cpu];
        if let Ok(n) = cuda {
            for i in 0..*n {
                let mut info = DeviceInfo::new(Device::TorchCuda(i), format!("libtorch CUDA {i}"));
                match ffi::cuda_uuid(i) {
                    Ok(u) => info.uuid = Some(format_uuid(u)),
                    Err(e) => info.details.push(("uuid".to_owned(), e)),
                }
                if let Ok(Some(m)) = ffi::cuda_memory(i) {
                    info.total_memory = Some(m.total);
                    info.free_memory = Some(m.free);
                }
                info.capabilities = Capabilities {
                    fp16: true,
                    bf16: true,
                    fp64: true,
                    ..Capabilities::default()
                };
                out.push(info);
            }
        }
        Ok(out)
    }

    fn release_pool(&self, device: Device) -> u64 {
        let Ok(Some(n)) = self.cuda_index(device) else {
            return 0;
        };
        let before = ffi::cuda_memory(n).ok().flatten().map(|m| m.reserved);
        if let Err(e) = ffi::cuda_empty_cache() {
            log::warn!("torch: emptying the CUDA cache failed: {e}");
            return 0;
        }
        let after = ffi::cuda_memory(n).ok().flatten().map(|m| m.reserved);
        match (before, after) {
            (Some(b), Some(a)) => b.saturating_sub(a),
            _ => 0,
        }
    }

    fn converters(&self) -> Vec<Arc<dyn Converter>> {
        #[allow(unused_mut)]
        let mut c = crate::convert::converters();
        #[cfg(feature = "cuda-interop")]
        c.extend(crate::cuda_interop::converters());
        c
    }
}

/// The backend, ready to register with a [`bridge_core::convert::Registry`].
pub fn backend() -> Arc<TorchBackend> {
    Arc::new(TorchBackend::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_format_matches_nvidia_smi() {
        let b: [u8; 16] = core::array::from_fn(|i| i as u8 * 17);
        assert_eq!(format_uuid(b), "GPU-00112233-4455-6677-8899-aabbccddeeff");
    }
}
