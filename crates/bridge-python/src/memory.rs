//! The host memory budget in Python (`docs/reliability.md`, "The memory budget"): the
//! explicit limit `ARRAYBRIDGE_MEMORY_LIMIT_MB`, validated at import as the command line
//! validates it at start; `set_memory_limit` / `memory_limit`, which set and read it; and the
//! check that every host allocation whose size comes from an input's shape (a copy of a
//! broadcast or strided view, a device array read back, a detection batch) goes through
//! **before** it is made.
//!
//! The limit lives in the process environment (through `os.environ`, so Python and child
//! processes see it) and is handed to the library as a value (`bridge_core::host::set_limit_mib`)
//! when it is set and before every check, so the library's threads never read the environment
//! while Python writes it: the budget is the smallest of it and the machine's limits (available
//! memory, the cgroup, `ulimit -v`), exactly as for the command line.

use bridge_core::host::{self, LIMIT_ENV};
use pyo3::prelude::*;
use pyo3::types::PyBool;

use crate::errors::{IntoPy, invalid};

/// The explicit limit in MiB (`None` when unset), or `InvalidInput` naming a value that is not
/// a whole number of MiB ≥ 1 (the command line's message). Python's `os.environ` is where the
/// limit lives, so it is read here (the package is an edge) and handed to the library as a
/// value ([`host::set_limit_mib`]) before each check.
pub(crate) fn explicit_limit() -> PyResult<Option<u64>> {
    let raw = std::env::var_os(LIMIT_ENV);
    let limit =
        bridge_core::tuning::parse_memory_limit(raw.as_deref().map(|v| v.to_string_lossy()))
            .py_err()?;
    host::set_limit_mib(limit);
    Ok(limit)
}

/// `OutOfMemory` (a [`bridge_core::BridgeError::TooLarge`] naming `what`, the bytes asked for
/// and the bytes that fit) unless `bytes` fit in the host budget now; `InvalidInput` when the
/// explicit limit was set to an invalid value after import. Allocates nothing.
pub(crate) fn check(bytes: u64, what: &str, hint: &str) -> PyResult<()> {
    explicit_limit()?;
    host::check_allocation(bytes, what, hint).py_err()
}

/// [`check`] for a check the library made (its `TooLarge` is `OutOfMemory`).
pub(crate) fn check_result(r: bridge_core::Result<()>) -> PyResult<()> {
    explicit_limit()?;
    r.py_err()
}

/// `arraybridge.set_memory_limit(mb)`: cap the host memory arraybridge may allocate at `mb`
/// MiB (a whole number ≥ 1), or remove the cap with `None`; sets `ARRAYBRIDGE_MEMORY_LIMIT_MB`
/// in `os.environ`.
#[pyfunction]
pub fn set_memory_limit(py: Python<'_>, mb: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let environ = py.import("os")?.getattr("environ")?;
    let Some(mb) = mb else {
        environ.call_method1("pop", (LIMIT_ENV, py.None()))?;
        host::set_limit_mib(None);
        return Ok(());
    };
    let refuse = || {
        let shown = mb
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "?".into());
        invalid(format!(
            "invalid argument mb: expected a whole number of MiB, at least 1 (e.g. 4096), or \
             None for no explicit limit, got {shown}"
        ))
    };
    // `True` is an int to Python; a float (even 512.0) is not a whole number of MiB here, as
    // `1e0` is not for the variable
    if mb.is_instance_of::<PyBool>() {
        return Err(refuse());
    }
    let n: u64 = match mb.extract::<u64>() {
        Ok(n) if n >= 1 => n,
        _ => return Err(refuse()),
    };
    environ.set_item(LIMIT_ENV, n.to_string())?;
    host::set_limit_mib(Some(n));
    Ok(())
}

/// `arraybridge.memory_limit()`: the explicit limit in MiB, `None` when there is none.
#[pyfunction]
pub fn memory_limit() -> PyResult<Option<u64>> {
    explicit_limit()
}

/// `arraybridge._native.check_host_allocation(nbytes, what)`: `OutOfMemory` (naming `what`)
/// unless `nbytes` fit the host budget now, for the package's own Python-side copies (a
/// `float16` image widened for `blob_log`, ...). Allocates nothing.
#[pyfunction]
pub fn check_host_allocation(nbytes: u64, what: &str) -> PyResult<()> {
    check(nbytes, what, "")
}

/// `arraybridge.memory_stats(device)`: the device's memory as a dict: `total`, `free` (where the
/// driver says; `None` for OpenCL), `used` (`total − free` where known), and its pool's
/// figures: `pool_reserved` (held from the device), `pool_in_use`, `pool_cached`, `pool_peak`
/// (the most held at once), `pool_limit` (bytes, or `None`), `allocations` (made on the device)
/// and `cache_hits`. For `"cpu"`: the host's total and available memory and the budget's
/// explicit limit; no pool.
#[pyfunction]
pub fn memory_stats<'py>(
    py: Python<'py>,
    device: &str,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let d = device.parse::<bridge_core::Device>().py_err()?;
    let out = pyo3::types::PyDict::new(py);
    out.set_item("device", d.to_string())?;
    let st = if d == bridge_core::Device::Cpu {
        let (total, free) = host::meminfo();
        bridge_core::memory::MemoryStats {
            total: total.unwrap_or(0),
            free,
            pool_limit: explicit_limit()?.map(|mb| mb.saturating_mul(1 << 20)),
            ..Default::default()
        }
    } else {
        arraybridge::registry().memory_stats(d).py_err()?
    };
    out.set_item("total", st.total)?;
    out.set_item("free", st.free)?;
    out.set_item("used", st.free.map(|f| st.total.saturating_sub(f)))?;
    out.set_item("pool_reserved", st.pool_reserved)?;
    out.set_item("pool_in_use", st.pool_in_use)?;
    out.set_item("pool_cached", st.pool_cached)?;
    out.set_item("pool_peak", st.pool_peak)?;
    out.set_item("pool_limit", st.pool_limit)?;
    out.set_item("allocations", st.allocations)?;
    out.set_item("cache_hits", st.cache_hits)?;
    Ok(out)
}

/// `arraybridge.free_pools(device)`: give the cached (unused) blocks of every pool on the
/// device back to it; returns the bytes released (arrays still alive keep theirs).
#[pyfunction]
pub fn free_pools(device: &str) -> PyResult<u64> {
    let d = device.parse::<bridge_core::Device>().py_err()?;
    if d == bridge_core::Device::Cpu {
        return Ok(0);
    }
    // an unknown or absent device is its typed error, not "nothing released"
    arraybridge::registry().memory_stats(d).py_err()?;
    Ok(arraybridge::registry().release_pools(d))
}

/// `arraybridge.set_device_memory_limit(device, limit)`: cap what the device's pool may hold
/// at `limit`, a fraction of its memory in `(0, 1]` (a float) or a number of bytes (an int
/// ≥ 1); `None` removes the cap. Allocations beyond it are `OutOfMemory`, which the pipelines
/// answer by splitting their batches (same results).
#[pyfunction]
pub fn set_device_memory_limit(device: &str, limit: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let d = device.parse::<bridge_core::Device>().py_err()?;
    if d == bridge_core::Device::Cpu {
        return Err(invalid(
            "the host has no pool: set_memory_limit(mb) caps host memory",
        ));
    }
    let reg = arraybridge::registry();
    let Some(limit) = limit else {
        return reg.set_memory_limit(d, None).py_err();
    };
    let refuse = |why: &str| {
        let shown = limit
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "?".into());
        invalid(format!(
            "invalid argument limit: {why}, got {shown} (a fraction in (0, 1] as a float, \
             bytes as an int >= 1, or None)"
        ))
    };
    if limit.is_instance_of::<PyBool>() {
        return Err(refuse("a bool is not a limit"));
    }
    let fraction = if let Ok(bytes) = limit.extract::<u64>() {
        if bytes == 0 {
            return Err(refuse("0 bytes"));
        }
        let total = reg.memory_stats(d).py_err()?.total;
        if total == 0 {
            return Err(invalid(format!("{d} does not report its memory size")));
        }
        // the pool's limit is a fraction of the total (floored back to bytes): half a byte
        // more makes the bytes asked for what the pool enforces
        ((bytes as f64 + 0.5) / total as f64).min(1.0)
    } else if let Ok(f) = limit.extract::<f64>() {
        if !(f > 0.0 && f <= 1.0) {
            return Err(refuse("a fraction must be in (0, 1]"));
        }
        let total = reg.memory_stats(d).py_err()?.total;
        if total > 0 && (f * total as f64).floor() < 1.0 {
            return Err(refuse(&format!(
                "this fraction of {d}'s {total} bytes is less than one byte"
            )));
        }
        f
    } else {
        return Err(refuse("not a number"));
    };
    let limit = bridge_core::memory::MemoryLimit::fraction(fraction).py_err()?;
    reg.set_memory_limit(d, Some(limit)).py_err()
}
