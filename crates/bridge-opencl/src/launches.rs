//! The launches of a device's queue in flight (see the [executor's docs](crate::executor)):
//! one list per device and backend instance, kept by the backend
//! ([`crate::OpenClBackend`]) and shared by every executor of the device.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bridge_core::Result;

use crate::buffer::Pending;

/// Launches a device's list holds in flight at most: a launch beyond waits for the oldest.
pub const MAX_IN_FLIGHT: usize = 64;

/// One launch in flight: its token (event and buffers), the kernel's name (for errors) and
/// the kernel-time total of the executor that launched it.
pub(crate) struct Launch {
    /// The launch's token (its event and buffers).
    pub(crate) pending: Pending<()>,
    /// The kernel's name.
    pub(crate) kernel: String,
    /// The kernel-time total (ns) of the executor that launched it.
    pub(crate) clock: Arc<AtomicU64>,
}

impl Launch {
    /// Wait for the kernel and add its device time to its executor's total.
    pub(crate) fn collect(self) -> Result<()> {
        let Launch {
            pending,
            kernel,
            clock,
        } = self;
        let ((), ns) = pending.wait_profiled(&format!("kernel {kernel}"))?;
        if let Some(ns) = ns {
            clock.fetch_add(ns, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The launches of one device's queue that no wait has collected yet, oldest first; one per
/// device and backend instance ([`OpenClBackend::launches`]).
#[derive(Default)]
pub(crate) struct Launches {
    queue: Mutex<VecDeque<Launch>>,
}

impl std::fmt::Debug for Launches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Launches({} in flight)", self.lock().len())
    }
}

impl Launches {
    pub(crate) fn lock(&self) -> MutexGuard<'_, VecDeque<Launch>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Add a launch; collect those already complete, and wait for the oldest while more than
    /// [`MAX_IN_FLIGHT`] are in flight. The first failure collected is returned (after the
    /// others were collected).
    pub(crate) fn push(&self, launch: Launch) -> Result<()> {
        self.lock().push_back(launch);
        let mut first = Ok(());
        loop {
            let next = {
                let mut q = self.lock();
                let done = match q.front() {
                    None => break,
                    Some(l) => q.len() > MAX_IN_FLIGHT || l.pending.is_complete().unwrap_or(true),
                };
                if !done {
                    break;
                }
                q.pop_front()
            };
            // waited for outside the lock: other threads' launches go on meanwhile
            if let Some(l) = next
                && let Err(e) = l.collect()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// Wait for every launch in the list (those other threads add meanwhile included); the
    /// first failure is returned after all were collected.
    pub(crate) fn drain(&self) -> Result<()> {
        let mut first = Ok(());
        loop {
            let next = self.lock().pop_front();
            let Some(l) = next else { break };
            if let Err(e) = l.collect()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// How many launches are in flight (not yet collected).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}
