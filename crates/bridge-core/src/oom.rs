//! Out-of-memory handling: a retry policy that releases every backend's pool on the device
//! before trying again, then fails, splits the batch, or (opt-in, always reported) falls back to
//! the CPU.
//!
//! Only [`BridgeError::OutOfMemory`] is ever retried; every other error is returned at once.
//!
//! ```
//! use bridge_core::oom::{with_oom_retry, RetryPolicy};
//! use bridge_core::convert::Registry;
//! use bridge_core::{BridgeError, Device};
//! let reg = Registry::new();
//! let mut calls = 0;
//! let v = with_oom_retry(&RetryPolicy::default(), Device::Cuda(0), &reg, || {
//!     calls += 1;
//!     if calls < 2 {
//!         Err(BridgeError::OutOfMemory { device: Device::Cuda(0), requested: 1 << 30, attempts: 1 })
//!     } else {
//!         Ok(42)
//!     }
//! })?;
//! assert_eq!((v, calls), (42, 2));
//! # Ok::<(), BridgeError>(())
//! ```

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::convert::{ConversionObserver, OomEvent, Registry};
use crate::device::{Device, MemoryType};
use crate::error::{BridgeError, Result};

/// Which pools to release before a retry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ReleaseScope {
    /// Every registered backend's pool on the device (and on the same hardware under other
    /// backends' names). The default.
    #[default]
    AllBackends,
    /// Only these backends' pools.
    Only(Vec<MemoryType>),
    /// Release nothing (retry after the backoff only).
    Nothing,
}

/// What to do when the retries are used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnExhausted {
    /// Return [`BridgeError::OutOfMemory`]. The default.
    #[default]
    Fail,
    /// Run the batch as two halves, recursively, down to single items.
    SplitBatch,
    /// Run on the CPU instead. Opt-in; always logged and reported to the observer.
    CpuFallback,
}

/// How to react to [`BridgeError::OutOfMemory`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Wait before the first retry; doubles for each further retry.
    pub backoff: Duration,
    /// Which pools to release before each retry.
    pub release: ReleaseScope,
    /// What to do when retries are used up.
    pub on_exhausted: OnExhausted,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            backoff: Duration::from_millis(0),
            release: ReleaseScope::AllBackends,
            on_exhausted: OnExhausted::Fail,
        }
    }
}

impl RetryPolicy {
    /// No retry; on out of memory, halve the batch (recursively; one item that still does not
    /// fit is the error). For jobs whose items are independent, so the results do not depend
    /// on the split, and whose pool frees its own cache on a limit breach.
    pub fn split_only() -> Self {
        RetryPolicy {
            max_retries: 0,
            release: ReleaseScope::Nothing,
            on_exhausted: OnExhausted::SplitBatch,
            ..RetryPolicy::default()
        }
    }
}

/// A [`PoolReleaser`] that releases nothing (for [`RetryPolicy::split_only`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRelease;

impl PoolReleaser for NoRelease {
    fn release(&self, _device: Device, _scope: &ReleaseScope) -> u64 {
        0
    }
}

/// Something that can release cached device memory. [`Registry`] implements it over all its
/// backends.
pub trait PoolReleaser {
    /// Release pools on `device` within `scope`; returns bytes released.
    fn release(&self, device: Device, scope: &ReleaseScope) -> u64;
    /// Where OOM events are reported, if anywhere.
    fn observer(&self) -> Option<Arc<dyn ConversionObserver>> {
        None
    }
}

impl PoolReleaser for Registry {
    fn release(&self, device: Device, scope: &ReleaseScope) -> u64 {
        match scope {
            ReleaseScope::AllBackends => self.release_pools(device),
            ReleaseScope::Nothing => 0,
            ReleaseScope::Only(types) => self
                .backends()
                .iter()
                .filter(|b| types.contains(&b.memory_type()))
                .flat_map(|b| {
                    self.topology()
                        .devices_of(b.memory_type())
                        .filter(|d| self.topology().same_physical(*d, device))
                        .map(move |d| b.release_pool(d))
                        .collect::<Vec<_>>()
                })
                .sum(),
        }
    }

    fn observer(&self) -> Option<Arc<dyn ConversionObserver>> {
        Registry::observer(self)
    }
}

fn report(releaser: &dyn PoolReleaser, event: OomEvent) {
    match &event {
        OomEvent::CpuFallback { device, reason } => {
            log::warn!(
                "out of memory on {device}; falling back to the CPU as the retry policy allows: {reason}"
            )
        }
        OomEvent::SplitBatch { device, len } => {
            log::info!("out of memory on {device}; splitting a batch of {len} in two")
        }
        OomEvent::Retry {
            device,
            attempt,
            released,
        } => log::info!(
            "out of memory on {device} (attempt {attempt}); released {released} bytes, retrying"
        ),
    }
    if let Some(obs) = releaser.observer() {
        obs.on_oom_event(&event);
    }
}

fn oom_requested(e: &BridgeError) -> u64 {
    match e {
        BridgeError::OutOfMemory { requested, .. } => *requested,
        _ => 0,
    }
}

/// Run `op`, retrying on [`BridgeError::OutOfMemory`] per `policy` (release, backoff). When the
/// retries are used up the OOM error is returned with the number of attempts, whatever
/// `on_exhausted` says (use [`run_batched`] for `SplitBatch` and `CpuFallback`). Non-OOM errors
/// return at once.
pub fn with_oom_retry<T>(
    policy: &RetryPolicy,
    device: Device,
    releaser: &dyn PoolReleaser,
    mut op: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match op() {
            Ok(v) => return Ok(v),
            Err(e) if e.is_oom() => {
                if attempt > policy.max_retries {
                    return Err(BridgeError::OutOfMemory {
                        device,
                        requested: oom_requested(&e),
                        attempts: attempt,
                    });
                }
                let released = releaser.release(device, &policy.release);
                report(
                    releaser,
                    OomEvent::Retry {
                        device,
                        attempt,
                        released,
                    },
                );
                let wait = policy.backoff.saturating_mul(1u32 << (attempt - 1).min(16));
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Run a batched job over items `0..len` on `device`, with OOM handling per `policy`:
/// retry (releasing pools); then, when retries are used up,
/// - `Fail`: return the OOM error;
/// - `SplitBatch`: run the range as two halves (each with its own retries), recursively, and
///   concatenate the results in order; a single item that still does not fit fails;
/// - `CpuFallback`: run the range with `cpu_op`, reporting an [`OomEvent::CpuFallback`]. If
///   `cpu_op` is `None` this is an error.
///
/// `device_op(range)` must return one result per item of `range`, in order.
pub fn run_batched<T>(
    policy: &RetryPolicy,
    device: Device,
    releaser: &dyn PoolReleaser,
    len: usize,
    device_op: &mut dyn FnMut(Range<usize>) -> Result<Vec<T>>,
    cpu_op: Option<&mut dyn FnMut(Range<usize>) -> Result<Vec<T>>>,
) -> Result<Vec<T>> {
    let mut cpu_op = cpu_op;
    let mut out = Vec::with_capacity(len);
    // Work list of ranges in order; a split replaces a range by its halves.
    let mut todo: Vec<Range<usize>> = Vec::new();
    if len > 0 {
        todo.push(0..len);
    }
    while let Some(range) = todo.pop() {
        let n = range.len();
        match with_oom_retry(policy, device, releaser, || device_op(range.clone())) {
            Ok(v) => {
                if v.len() != n {
                    return Err(BridgeError::shape_mismatch(
                        format!("{n} results"),
                        format!("{} results", v.len()),
                        "run_batched device_op",
                    ));
                }
                out.extend(v);
            }
            Err(e) if e.is_oom() => match policy.on_exhausted {
                OnExhausted::Fail => return Err(e),
                OnExhausted::SplitBatch if n > 1 => {
                    report(releaser, OomEvent::SplitBatch { device, len: n });
                    let mid = range.start + n / 2;
                    todo.push(mid..range.end);
                    todo.push(range.start..mid);
                }
                OnExhausted::SplitBatch => return Err(e),
                OnExhausted::CpuFallback => {
                    let Some(cpu) = cpu_op.as_mut() else {
                        return Err(BridgeError::invalid_argument(
                            "on_exhausted",
                            format!(
                                "CpuFallback was requested but no CPU implementation was given ({e})"
                            ),
                        ));
                    };
                    report(
                        releaser,
                        OomEvent::CpuFallback {
                            device,
                            reason: e.to_string(),
                        },
                    );
                    let v = cpu(range.clone())?;
                    if v.len() != n {
                        return Err(BridgeError::shape_mismatch(
                            format!("{n} results"),
                            format!("{} results", v.len()),
                            "run_batched cpu_op",
                        ));
                    }
                    out.extend(v);
                }
            },
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
