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
    let limit = host::limit_from_env().py_err()?;
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
