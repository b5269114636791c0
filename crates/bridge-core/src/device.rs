//! Memory types and devices.
//!
//! A [`MemoryType`] says *which framework owns the memory* (ndarray on the host, a CUDA buffer, an
//! OpenCL buffer, a Torch tensor); a [`Device`] says *where it lives*. Devices print to and parse
//! from the strings users type: `cpu`, `cuda:N`, `opencl:N`, `torch:cpu`, `torch:cuda:N`.
//!
//! ```
//! use bridge_core::{Device, MemoryType};
//! let d: Device = "torch:cuda:1".parse()?;
//! assert_eq!(d, Device::TorchCuda(1));
//! assert_eq!(d.to_string(), "torch:cuda:1");
//! assert_eq!(d.memory_type(), MemoryType::Torch);
//! assert!("cuda:x".parse::<Device>().is_err());
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::error::BridgeError;

/// Which framework owns a block of memory. Serialised as its [`MemoryType::name`] (`"opencl"`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum MemoryType {
    /// Host memory owned by an `ndarray::ArrayD`.
    Host,
    /// A CUDA device allocation (bridge-cuda).
    Cuda,
    /// An OpenCL buffer (bridge-opencl).
    OpenCl,
    /// A PyTorch tensor (bridge-torch), on `torch:cpu` or `torch:cuda:N`.
    Torch,
}

impl MemoryType {
    /// All memory types, in a fixed order.
    pub const ALL: [MemoryType; 4] = [
        MemoryType::Host,
        MemoryType::Cuda,
        MemoryType::OpenCl,
        MemoryType::Torch,
    ];

    /// Lower-case backend name (`host`, `cuda`, `opencl`, `torch`).
    pub fn name(self) -> &'static str {
        match self {
            MemoryType::Host => "host",
            MemoryType::Cuda => "cuda",
            MemoryType::OpenCl => "opencl",
            MemoryType::Torch => "torch",
        }
    }

    /// Whether memory of this type can live on `device`.
    pub fn can_live_on(self, device: Device) -> bool {
        device.memory_type() == self
    }
}

impl fmt::Display for MemoryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A device, as users name it.
///
/// Each variant belongs to exactly one [`MemoryType`] ([`Device::memory_type`]); whether two
/// devices of different backends are the same physical GPU (`cuda:0` and `torch:cuda:0`, say) is
/// a question for the registry's topology, which compares device UUIDs.
///
/// Serialised as the name users type (`"cpu"`, `"cuda:0"`, `"opencl:1"`, `"torch:cuda:0"`,
/// its [`Display`](fmt::Display)), and read back from it ([`FromStr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// The host CPU (ndarray memory).
    Cpu,
    /// CUDA device with the given ordinal.
    Cuda(usize),
    /// OpenCL device with the given ordinal (stable enumeration order across platforms).
    OpenCl(usize),
    /// A Torch tensor on the CPU.
    TorchCpu,
    /// A Torch tensor on CUDA device N.
    TorchCuda(usize),
}

impl Device {
    /// The memory type native to this device.
    pub fn memory_type(self) -> MemoryType {
        match self {
            Device::Cpu => MemoryType::Host,
            Device::Cuda(_) => MemoryType::Cuda,
            Device::OpenCl(_) => MemoryType::OpenCl,
            Device::TorchCpu | Device::TorchCuda(_) => MemoryType::Torch,
        }
    }

    /// The ordinal, for devices that have one.
    pub fn ordinal(self) -> Option<usize> {
        match self {
            Device::Cuda(n) | Device::OpenCl(n) | Device::TorchCuda(n) => Some(n),
            Device::Cpu | Device::TorchCpu => None,
        }
    }

    /// True when the memory is in host RAM (`cpu`, `torch:cpu`).
    pub fn is_host_memory(self) -> bool {
        matches!(self, Device::Cpu | Device::TorchCpu)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
            Device::OpenCl(n) => write!(f, "opencl:{n}"),
            Device::TorchCpu => f.write_str("torch:cpu"),
            Device::TorchCuda(n) => write!(f, "torch:cuda:{n}"),
        }
    }
}

impl serde::Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Device {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn parse_ordinal(input: &str, text: &str) -> Result<usize, BridgeError> {
    let bad = |reason: &str| BridgeError::ParseDevice {
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    if text.is_empty() {
        return Err(bad("missing device ordinal after ':'"));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("device ordinal must be a non-negative integer"));
    }
    if text.len() > 1 && text.starts_with('0') {
        return Err(bad("device ordinal must not have leading zeros"));
    }
    text.parse::<usize>()
        .map_err(|_| bad("device ordinal is too large"))
}

impl FromStr for Device {
    type Err = BridgeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let input = s;
        let s = s.trim();
        let bad = |reason: &str| BridgeError::ParseDevice {
            input: input.to_owned(),
            reason: reason.to_owned(),
        };
        let lower = s.to_ascii_lowercase();
        let mut parts = lower.splitn(3, ':');
        let head = parts.next().unwrap_or_default();
        let second = parts.next();
        let third = parts.next();
        match (head, second, third) {
            ("cpu", None, None) => Ok(Device::Cpu),
            ("cuda", Some(n), None) => Ok(Device::Cuda(parse_ordinal(input, n)?)),
            ("opencl", Some(n), None) => Ok(Device::OpenCl(parse_ordinal(input, n)?)),
            ("torch", Some("cpu"), None) => Ok(Device::TorchCpu),
            ("torch", Some("cuda"), Some(n)) => Ok(Device::TorchCuda(parse_ordinal(input, n)?)),
            ("cuda" | "opencl", None, _) => Err(bad("missing device ordinal (write e.g. cuda:0)")),
            ("torch", Some("cuda"), None) => {
                Err(bad("missing device ordinal (write torch:cuda:0)"))
            }
            ("torch", _, _) => Err(bad("torch devices are torch:cpu or torch:cuda:N")),
            ("cpu", _, _) => Err(bad("cpu takes no ordinal")),
            ("", _, _) => Err(bad("empty device string")),
            _ => Err(bad("unknown backend")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_uses_the_names_users_type() {
        let v = serde_json::to_string(&[Device::OpenCl(0), Device::TorchCuda(2), Device::Cpu])
            .unwrap_or_default();
        assert_eq!(v, r#"["opencl:0","torch:cuda:2","cpu"]"#);
        let back: Vec<Device> = serde_json::from_str(&v).unwrap_or_default();
        assert_eq!(back, [Device::OpenCl(0), Device::TorchCuda(2), Device::Cpu]);
        assert!(serde_json::from_str::<Device>(r#""opencl:x""#).is_err());
        assert_eq!(
            serde_json::to_string(&(MemoryType::OpenCl, crate::dtype::DType::BF16))
                .unwrap_or_default(),
            r#"["opencl","bf16"]"#
        );
    }

    #[test]
    fn round_trip() {
        for d in [
            Device::Cpu,
            Device::Cuda(0),
            Device::Cuda(12),
            Device::OpenCl(3),
            Device::TorchCpu,
            Device::TorchCuda(1),
        ] {
            let s = d.to_string();
            assert_eq!(s.parse::<Device>().ok(), Some(d), "{s}");
        }
    }

    #[test]
    fn case_and_whitespace() {
        assert_eq!(" CUDA:1 ".parse::<Device>().ok(), Some(Device::Cuda(1)));
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "",
            "gpu",
            "cuda",
            "cuda:",
            "cuda:-1",
            "cuda:x",
            "cuda:01",
            "cuda:1:2",
            "cpu:0",
            "opencl:",
            "torch",
            "torch:cuda",
            "torch:cuda:",
            "torch:gpu:0",
            "torch:cpu:0",
            "cuda:99999999999999999999999",
        ] {
            let e = s.parse::<Device>();
            assert!(
                matches!(e, Err(BridgeError::ParseDevice { .. })),
                "{s:?} -> {e:?}"
            );
        }
    }

    #[test]
    fn memory_types() {
        assert_eq!(Device::Cpu.memory_type(), MemoryType::Host);
        assert_eq!(Device::TorchCpu.memory_type(), MemoryType::Torch);
        assert!(MemoryType::Cuda.can_live_on(Device::Cuda(0)));
        assert!(!MemoryType::Host.can_live_on(Device::Cuda(0)));
        assert!(Device::TorchCpu.is_host_memory());
        assert_eq!(Device::OpenCl(2).ordinal(), Some(2));
    }
}
