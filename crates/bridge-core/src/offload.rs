//! Deciding whether work should run on the CPU or a device — and saying why.
//!
//! [`decide`] compares an estimate of the CPU time with, for each candidate device, the time to
//! move the inputs there and the results back plus the device's compute time. A device wins only
//! when it fits in free memory (with headroom) and beats the CPU by at least
//! [`OffloadThresholds::min_speedup`]. The [`OffloadDecision::reason`] always explains the choice.
//!
//! ```
//! use bridge_core::offload::{decide, CpuProfile, DeviceProfile, OffloadThresholds, Workload};
//! use bridge_core::Device;
//! let work = Workload { input_bytes: 1 << 30, output_bytes: 1 << 20, flops: 5e11 };
//! let cpu = CpuProfile { flops_per_s: 5e10 };
//! let gpu = DeviceProfile {
//!     device: Device::Cuda(0),
//!     h2d_bytes_per_s: 2.5e10,
//!     d2h_bytes_per_s: 2.5e10,
//!     flops_per_s: 5e13,
//!     free_memory: Some(80 << 30),
//!     launch_overhead_s: 1e-5,
//! };
//! let d = decide(&work, &cpu, &[gpu], &OffloadThresholds::default());
//! assert_eq!(d.device, Device::Cuda(0));
//! assert!(d.reason.contains("faster"));
//! ```

use std::fmt;

use crate::device::Device;

/// What a job needs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Workload {
    /// Bytes that must be moved to the device.
    pub input_bytes: u64,
    /// Bytes that must come back.
    pub output_bytes: u64,
    /// Arithmetic work (floating-point operations, or any consistent unit).
    pub flops: f64,
}

/// Measured CPU throughput.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CpuProfile {
    /// Throughput in the workload's work units per second.
    pub flops_per_s: f64,
}

/// Measured (or nominal) figures of a candidate device.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DeviceProfile {
    /// The device.
    pub device: Device,
    /// Host-to-device bandwidth, bytes/s.
    pub h2d_bytes_per_s: f64,
    /// Device-to-host bandwidth, bytes/s.
    pub d2h_bytes_per_s: f64,
    /// Throughput in the workload's work units per second.
    pub flops_per_s: f64,
    /// Free device memory, if known.
    pub free_memory: Option<u64>,
    /// Fixed cost per job (launches, synchronisation), seconds.
    pub launch_overhead_s: f64,
}

/// Knobs of the decision.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct OffloadThresholds {
    /// A device must be at least this many times faster than the CPU (default 1.5).
    pub min_speedup: f64,
    /// Fraction of free memory the job may use (default 0.9).
    pub memory_headroom: f64,
    /// Jobs with fewer input bytes stay on the CPU (default 0: no floor).
    pub min_input_bytes: u64,
}

impl Default for OffloadThresholds {
    fn default() -> Self {
        OffloadThresholds {
            min_speedup: 1.5,
            memory_headroom: 0.9,
            min_input_bytes: 0,
        }
    }
}

/// The estimate for one device.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DeviceEstimate {
    /// The device.
    pub device: Device,
    /// Transfer time in seconds (both ways).
    pub transfer_s: f64,
    /// Compute time plus launch overhead in seconds.
    pub compute_s: f64,
    /// Whether the job fits in free memory (true when free memory is unknown).
    pub fits: bool,
}

impl DeviceEstimate {
    /// Total estimated seconds.
    pub fn total_s(&self) -> f64 {
        self.transfer_s + self.compute_s
    }
}

/// The choice and its explanation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OffloadDecision {
    /// Where to run.
    pub device: Device,
    /// Why, in one sentence with the numbers.
    pub reason: String,
    /// Estimated CPU seconds.
    pub cpu_s: f64,
    /// Estimates for every candidate device.
    pub estimates: Vec<DeviceEstimate>,
}

impl fmt::Display for OffloadDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.device, self.reason)
    }
}

fn ms(s: f64) -> String {
    if s.is_finite() {
        format!("{:.3} ms", s * 1e3)
    } else {
        "∞".to_owned()
    }
}

fn per_s(bytes: u64, rate: f64) -> f64 {
    if bytes == 0 {
        0.0
    } else if rate > 0.0 {
        bytes as f64 / rate
    } else {
        f64::INFINITY
    }
}

/// Decide where to run `work`. Never silent: the reason names the numbers behind the choice.
pub fn decide(
    work: &Workload,
    cpu: &CpuProfile,
    devices: &[DeviceProfile],
    thresholds: &OffloadThresholds,
) -> OffloadDecision {
    let cpu_s = if cpu.flops_per_s > 0.0 {
        work.flops / cpu.flops_per_s
    } else {
        f64::INFINITY
    };
    let estimates: Vec<DeviceEstimate> = devices
        .iter()
        .map(|d| {
            let need = work.input_bytes.saturating_add(work.output_bytes);
            let fits = d
                .free_memory
                .is_none_or(|free| (need as f64) <= free as f64 * thresholds.memory_headroom);
            DeviceEstimate {
                device: d.device,
                transfer_s: per_s(work.input_bytes, d.h2d_bytes_per_s)
                    + per_s(work.output_bytes, d.d2h_bytes_per_s),
                compute_s: if d.flops_per_s > 0.0 {
                    work.flops / d.flops_per_s
                } else {
                    f64::INFINITY
                } + d.launch_overhead_s,
                fits,
            }
        })
        .collect();
    let decision = |device, reason: String| OffloadDecision {
        device,
        reason,
        cpu_s,
        estimates: estimates.clone(),
    };
    if devices.is_empty() {
        return decision(
            Device::Cpu,
            "no device available, running on the CPU".into(),
        );
    }
    if work.input_bytes < thresholds.min_input_bytes {
        return decision(
            Device::Cpu,
            format!(
                "input of {} bytes is below the offload floor of {} bytes, running on the CPU",
                work.input_bytes, thresholds.min_input_bytes
            ),
        );
    }
    let best = estimates
        .iter()
        .filter(|e| e.fits)
        .min_by(|a, b| a.total_s().total_cmp(&b.total_s()));
    let Some(best) = best else {
        let e = &estimates[0];
        let free = devices[0].free_memory.unwrap_or(0);
        return decision(
            Device::Cpu,
            format!(
                "{} needs {} bytes but only {} bytes are free ({}% headroom), running on the CPU",
                e.device,
                work.input_bytes.saturating_add(work.output_bytes),
                free,
                (thresholds.memory_headroom * 100.0).round()
            ),
        );
    };
    let speedup = cpu_s / best.total_s();
    let detail = format!(
        "{} est. {} (transfer {} + compute {}) vs cpu {}",
        best.device,
        ms(best.total_s()),
        ms(best.transfer_s),
        ms(best.compute_s),
        ms(cpu_s)
    );
    if speedup >= thresholds.min_speedup {
        decision(
            best.device,
            format!(
                "{detail}: {speedup:.1}x faster (threshold {:.1}x)",
                thresholds.min_speedup
            ),
        )
    } else {
        decision(
            Device::Cpu,
            format!(
                "{detail}: only {speedup:.2}x faster, below the {:.1}x threshold, running on the CPU",
                thresholds.min_speedup
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_at_their_largest_do_not_overflow() {
        let work = Workload {
            input_bytes: u64::MAX,
            output_bytes: u64::MAX,
            flops: 1.0,
        };
        let gpu = DeviceProfile {
            device: Device::Cuda(0),
            h2d_bytes_per_s: 1e10,
            d2h_bytes_per_s: 1e10,
            flops_per_s: 1e12,
            free_memory: Some(1),
            launch_overhead_s: 1e-5,
        };
        let d = decide(
            &work,
            &CpuProfile { flops_per_s: 1.0 },
            &[gpu],
            &OffloadThresholds::default(),
        );
        assert_eq!(d.device, Device::Cpu);
        assert!(d.reason.contains(&u64::MAX.to_string()), "{}", d.reason);
    }
}
