//! Host memory: how much the process may still allocate, and one check that every allocation
//! whose size comes from outside (a file header, a command-line flag, a parameter) goes through
//! before it happens.
//!
//! The budget is the smallest of:
//! * `MemAvailable` from `/proc/meminfo` (what the kernel can give without swapping);
//! * the cgroup v2 headroom (`memory.max − memory.current`) of the process's cgroup, which is
//!   what a container or `systemd-run -p MemoryMax=` enforces;
//! * the address-space limit (`ulimit -v`, `RLIMIT_AS`) minus the current virtual size;
//! * the explicit limit ([`set_limit_mib`]; the command line and the Python package set it from
//!   `ARRAYBRIDGE_MEMORY_LIMIT_MB` at start, and otherwise the variable is read once on first
//!   use; tests use it to simulate a small machine).
//!
//! Where none of these can be read (not Linux), the budget is unknown and only the hard
//! [`MAX_ALLOCATION`] applies.
//!
//! ```
//! use bridge_core::host::{check_allocation, Budget};
//!
//! // 1 KiB always fits.
//! check_allocation(1024, "a small buffer", "").unwrap();
//! // 2^62 bytes never does, and the error names what asked for it.
//! let e = check_allocation(1u64 << 62, "--frames 1000000000000", "use fewer frames").unwrap_err();
//! assert!(e.to_string().contains("--frames"));
//! assert!(Budget::current().bytes().is_some() || cfg!(not(target_os = "linux")));
//! ```

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{BridgeError, Result};

/// Environment variable: an explicit budget in MiB (the smaller of it and the machine's wins).
pub const LIMIT_ENV: &str = crate::tuning::MEMORY_LIMIT_ENV;

/// No single host allocation may exceed this many bytes (1 TiB), whatever the machine reports:
/// a guard against sizes computed from corrupt headers when the budget cannot be read.
pub const MAX_ALLOCATION: u64 = 1 << 40;

/// Where the binding limit of a [`Budget`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// `MemAvailable` in `/proc/meminfo`.
    Available,
    /// The cgroup's `memory.max` minus `memory.current`.
    Cgroup,
    /// `RLIMIT_AS` (`ulimit -v`) minus the current virtual size.
    AddressSpace,
    /// [`LIMIT_ENV`].
    Environment,
    /// [`MAX_ALLOCATION`] (nothing else could be read).
    HardCap,
}

impl std::fmt::Display for LimitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitSource::Available => "available host memory",
            LimitSource::Cgroup => "the cgroup memory limit",
            LimitSource::AddressSpace => "the address-space limit (ulimit -v)",
            LimitSource::Environment => LIMIT_ENV,
            LimitSource::HardCap => "the 1 TiB per-allocation cap",
        })
    }
}

/// Host memory as this process sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Total physical memory, when known.
    pub total: Option<u64>,
    /// Bytes the process may still allocate, and what limits it.
    pub limit: (u64, LimitSource),
}

impl Budget {
    /// Read the current budget (a few small `/proc` and `/sys` reads; no allocation of note).
    pub fn current() -> Self {
        let (total, available) = meminfo();
        let mut candidates: Vec<(u64, LimitSource)> = vec![(MAX_ALLOCATION, LimitSource::HardCap)];
        if let Some(a) = available {
            candidates.push((a, LimitSource::Available));
        }
        if let Some(c) = cgroup_headroom() {
            candidates.push((c, LimitSource::Cgroup));
        }
        if let Some(r) = address_space_headroom() {
            candidates.push((r, LimitSource::AddressSpace));
        }
        if let Some(e) = limit_mib() {
            candidates.push((e.saturating_mul(1 << 20), LimitSource::Environment));
        }
        let limit = candidates
            .into_iter()
            .min_by_key(|(b, _)| *b)
            .unwrap_or((MAX_ALLOCATION, LimitSource::HardCap));
        Budget { total, limit }
    }

    /// Bytes that may still be allocated; `None` when only the hard cap is known.
    pub fn bytes(&self) -> Option<u64> {
        (self.limit.1 != LimitSource::HardCap).then_some(self.limit.0)
    }

    /// Check that `bytes` fit; see [`check_allocation`].
    pub fn check(&self, bytes: u64, what: &str, hint: &str) -> Result<()> {
        let (limit, source) = self.limit;
        if bytes <= limit {
            return Ok(());
        }
        Err(BridgeError::TooLarge {
            what: what.to_string(),
            requested: bytes,
            limit,
            limited_by: source.to_string(),
            hint: hint.to_string(),
        })
    }
}

/// The explicit limit in MiB, 0 for none; first the process tuning's
/// ([`crate::tuning::Tuning::memory_limit_mib`]: [`LIMIT_ENV`] as the front end read it; a
/// refused value counts as none) unless [`set_limit_mib`] came first. The front ends read the
/// variable once at start and refuse a bad value instead of ignoring it.
fn limit_cell() -> &'static AtomicU64 {
    static LIMIT: OnceLock<AtomicU64> = OnceLock::new();
    LIMIT.get_or_init(|| {
        let mib = crate::tuning::process().memory_limit_mib();
        AtomicU64::new(mib.ok().flatten().unwrap_or(0))
    })
}

/// Set the explicit limit of this process in MiB (`None`: no explicit limit); the budget is
/// the smaller of it and the machine's limits. Takes effect for every later check, on every
/// thread.
pub fn set_limit_mib(mib: Option<u64>) {
    limit_cell().store(mib.unwrap_or(0), Ordering::Relaxed);
}

/// The explicit limit of this process in MiB (`None` when there is none).
pub fn limit_mib() -> Option<u64> {
    match limit_cell().load(Ordering::Relaxed) {
        0 => None,
        n => Some(n),
    }
}

/// Host RAM `(MemTotal, MemAvailable)` from `/proc/meminfo`, in bytes (`None` where it cannot
/// be read).
pub fn meminfo() -> (Option<u64>, Option<u64>) {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return (None, None);
    };
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kib| kib.saturating_mul(1024))
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// Fail with [`BridgeError::TooLarge`] unless `bytes` fit in the host [`Budget`] now.
///
/// `what` names the cause as the user wrote it (a flag with its value, a file and its header
/// field); `hint` says what would fit or what to change (may be empty).
///
/// Requests of at most [`SMALL_REQUEST`] bytes pass without reading the budget: the explicit
/// limit is a whole number of MiB (so they fit it), a machine with less than 1 MiB to spare is
/// past saving by a refusal, and the reads (≈ 15 µs of `/proc` and `/sys` per check) cost more
/// than a small call's own work.
pub fn check_allocation(bytes: u64, what: &str, hint: &str) -> Result<()> {
    if bytes <= SMALL_REQUEST {
        return Ok(());
    }
    Budget::current().check(bytes, what, hint)
}

/// Requests up to this many bytes always fit ([`check_allocation`]).
pub const SMALL_REQUEST: u64 = 1 << 20;

/// `a · b · …` in u64, `None` on overflow: sizes from headers and flags multiply safely.
pub fn checked_product(factors: &[u64]) -> Option<u64> {
    factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f))
}

pub use crate::units::format_bytes;

fn cgroup_headroom() -> Option<u64> {
    // cgroup v2: "0::/path" in /proc/self/cgroup.
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = cg.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let max = std::fs::read_to_string(dir.join("memory.max")).ok()?;
    let max = max.trim().parse::<u64>().ok()?; // "max" = unlimited → None
    let current = std::fs::read_to_string(dir.join("memory.current"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Some(max.saturating_sub(current))
}

fn address_space_headroom() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    // "Max address space   <soft>   <hard>   bytes"
    let soft = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?;
    let soft = soft.parse::<u64>().ok()?; // "unlimited" → None
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let vm = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib.saturating_mul(1024))
        .unwrap_or(0);
    Some(soft.saturating_sub(vm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_requests_fail_with_the_cause_named() {
        let e =
            check_allocation(u64::MAX, "--num-sigma 100000", "at most 64 scales fit").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("--num-sigma 100000"), "{s}");
        assert!(s.contains("at most 64 scales fit"), "{s}");
        assert!(matches!(e, BridgeError::TooLarge { .. }));
    }

    #[test]
    fn small_requests_fit() {
        check_allocation(4096, "x", "").unwrap();
    }

    #[test]
    fn explicit_budget_binds() {
        let b = Budget {
            total: None,
            limit: (1 << 20, LimitSource::Environment),
        };
        assert!(b.check(1 << 20, "x", "").is_ok());
        let e = b
            .check((1 << 20) + 1, "file.npy (shape [1, 2])", "")
            .unwrap_err();
        assert!(e.to_string().contains(LIMIT_ENV), "{e}");
    }

    #[test]
    fn products_do_not_overflow() {
        assert_eq!(checked_product(&[2, 3, 4]), Some(24));
        assert_eq!(checked_product(&[u64::MAX, 2]), None);
        assert_eq!(checked_product(&[]), Some(1));
    }

    #[test]
    fn bytes_print_in_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
    }
}
